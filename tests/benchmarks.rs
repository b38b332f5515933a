//! BENCHMARKS.md cannot drift from the runs it cites: `scripts/m0bench/page.py --check`
//! makes every table of figures again from benchmarks/runs/ and compares, checks the
//! page's length, its links and charts, and that every pointer into the benchmarks from
//! src/, docs/, scripts/ and README.md (`benchmarks/decisions.md, "NAME"`) names a heading.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn page_py(args: &[&std::ffi::OsStr]) -> Output {
    Command::new("python3")
        .arg(root().join("scripts/m0bench/page.py"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("python3 scripts/m0bench/page.py")
}

fn shown(out: &Output) -> String {
    format!(
        "{}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A copy of the page in a directory of its own, removed when dropped.
struct Copy(PathBuf);

impl Copy {
    fn of(page: &str, name: &str) -> Copy {
        let dir =
            std::env::temp_dir().join(format!("m0s-benchmarks-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let path = dir.join("BENCHMARKS.md");
        std::fs::write(&path, page).expect("write the altered page");
        Copy(path)
    }

    fn check(&self) -> Output {
        page_py(&["--check".as_ref(), "--page".as_ref(), self.0.as_os_str()])
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn the_page() -> String {
    std::fs::read_to_string(root().join("BENCHMARKS.md")).expect("BENCHMARKS.md")
}

#[test]
fn the_page_is_the_runs_it_cites_and_every_pointer_resolves() {
    let out = page_py(&["--check".as_ref()]);
    assert!(
        out.status.success(),
        "scripts/m0bench/page.py --check: {}",
        shown(&out)
    );
}

/// The check itself: one figure of a generated table changed by hand fails it, naming
/// the run that table comes from.
#[test]
fn the_check_fails_a_page_whose_figure_differs_from_its_run() {
    let page = the_page();
    // The first figure of the first generated table.
    let start = page
        .find("<!-- generated from benchmarks/runs/")
        .expect("a generated region in BENCHMARKS.md");
    let region = &page[start..];
    let row = region
        .lines()
        .nth(3) // past the marker, the table's head and its rule
        .expect("a table row");
    let figure = row
        .split('|')
        .map(str::trim)
        .find(|cell| cell.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .unwrap_or_else(|| panic!("a figure in {row:?}"));
    let altered_row = row.replacen(figure, &format!("{figure}1"), 1);
    let altered = page.replacen(row, &altered_row, 1);
    assert_ne!(altered, page);
    let copy = Copy::of(&altered, "figure");
    let out = copy.check();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success()
            && stdout.contains("differs from the page")
            && stdout.contains(&altered_row),
        "--check passed a page with {figure:?} changed: {}",
        shown(&out)
    );
}

/// And a page grown past its 200 lines fails it.
#[test]
fn the_check_fails_a_page_over_200_lines() {
    let mut page = the_page();
    let lines = page.lines().count();
    page.push_str(&"\nmore\n".repeat(201 - lines.min(200)));
    let copy = Copy::of(&page, "long");
    let out = copy.check();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && stdout.contains("more than 200"),
        "--check passed a page of more than 200 lines: {}",
        shown(&out)
    );
}
