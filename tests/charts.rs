//! The benchmark charts in docs/ (drawn by scripts/bench.py): every series of a chart has a
//! colour, a marker and a dash pattern of its own, in its points, its line and the legend,
//! so that the charts read in greyscale too. `scripts/bench.py --check-svg` reads them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn check(svgs: &[PathBuf]) -> Output {
    Command::new("python3")
        .arg(root().join("scripts/bench.py"))
        .arg("--check-svg")
        .args(svgs)
        .current_dir(root())
        .output()
        .expect("python3 scripts/bench.py --check-svg")
}

fn charts() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("bench-") && name.ends_with(".svg")
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_series_of_each_chart_has_its_own_colour_marker_and_dash() {
    let svgs = charts();
    assert!(!svgs.is_empty(), "no docs/bench-*.svg");
    let out = check(&svgs);
    assert!(
        out.status.success(),
        "scripts/bench.py --check-svg {:?}: {}\n{}{}",
        svgs,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The check itself: two series of one colour fail it.
#[test]
fn the_check_fails_a_chart_whose_series_share_a_colour() {
    let hello = root().join("docs/bench-hello.svg");
    let svg = std::fs::read_to_string(&hello).expect("docs/bench-hello.svg");
    // FastWSGI drawn in m0serve's colour (the palette's blue, the vermillion).
    assert!(
        svg.contains("#0072B2") && svg.contains("#D55E00"),
        "{hello:?}: another palette"
    );
    let bad = std::env::temp_dir().join(format!("m0s-charts-{}.svg", std::process::id()));
    std::fs::write(&bad, svg.replace("#0072B2", "#D55E00")).expect("write the altered chart");
    let out = check(std::slice::from_ref(&bad));
    let _ = std::fs::remove_file(&bad);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && stdout.contains("colour #D55E00 shared by m0serve"),
        "--check-svg passed a chart with two series in one colour: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
