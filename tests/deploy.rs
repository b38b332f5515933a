//! The deployment recipes in docs/deploy/. The Kubernetes manifest (kubernetes.yaml) is
//! parsed with PyYAML from the test virtualenv (M0S_TEST_VENV, made by scripts/test.sh;
//! without it the test is skipped: `common::require`) and checked: a Deployment and a Service whose
//! selectors match the pod's labels, the container's command line accepted by the real
//! binary (`--print-config`, and `--check-config` with the image's app from examples/),
//! probes and the Service's targetPort on the port m0serve listens on, resources set, and
//! terminationGracePeriodSeconds above the preStop sleep plus `--graceful-timeout` plus
//! the master's own 5 s before it kills what is left. The Dockerfile (no Docker engine
//! here): pip for the image's Python picks the manylinux wheel from the wheels
//! scripts/test.sh built (M0S_WHEELS), and the image's entrypoint, command and environment
//! pass `--check-config` from a virtualenv of that version (M0S_PACKAGE_VENVS). The systemd
//! unit: a virtualenv's `m0serve`, arguments the real program accepts. The autoscaler
//! (kubernetes-autoscaling.yaml): it scales that Deployment on the metric its
//! prometheus-adapter rule makes, from series a real scrape has.

mod common;
mod venvs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use venvs::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every document of a YAML file, through `yaml.safe_load_all` in the venv's Python.
fn load_yaml_all(venv: &Path, file: &Path) -> Vec<Json> {
    let out = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import json, sys, yaml\n\
             with open(sys.argv[1]) as f:\n\
             \x20   print(json.dumps([d for d in yaml.safe_load_all(f) if d is not None]))",
        ])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "PyYAML could not load {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = Json::parse(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
    docs.as_array().unwrap().clone()
}

fn str_map(j: &Json, what: &str) -> BTreeMap<String, String> {
    j.as_object()
        .unwrap_or_else(|| panic!("{what} is not a mapping: {j:?}"))
        .iter()
        .map(|(k, v)| {
            let v = v
                .as_str()
                .unwrap_or_else(|| panic!("{what}.{k} is not a string: {v:?}"));
            (k.clone(), v.to_string())
        })
        .collect()
}

fn assert_subset(sel: &BTreeMap<String, String>, labels: &BTreeMap<String, String>, what: &str) {
    assert!(!sel.is_empty(), "{what} is empty");
    for (k, v) in sel {
        assert_eq!(
            labels.get(k),
            Some(v),
            "{what} {k}={v} does not match the pod template's labels {labels:?}"
        );
    }
}

/// A Kubernetes port reference (a number, or the name of one of the container's ports)
/// as a number.
fn resolve_port(port: &Json, named: &BTreeMap<String, u16>, what: &str) -> u16 {
    match port {
        Json::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()).unwrap_or(0),
        Json::String(name) => *named
            .get(name)
            .unwrap_or_else(|| panic!("{what}: no container port named {name:?} in {named:?}")),
        other => panic!("{what}: port {other:?}"),
    }
}

/// The port a probe connects to (tcpSocket or httpGet).
fn probe_port(probe: &Json, named: &BTreeMap<String, u16>, what: &str) -> u16 {
    assert!(!probe.is_null(), "{what} is missing");
    let port = if !probe["tcpSocket"].is_null() {
        &probe["tcpSocket"]["port"]
    } else if !probe["httpGet"].is_null() {
        &probe["httpGet"]["port"]
    } else {
        panic!("{what}: neither tcpSocket nor httpGet: {probe:?}")
    };
    resolve_port(port, named, what)
}

/// Seconds the preStop hook sleeps: `exec: ["sleep", N]`, `["sh", "-c", "sleep N"]`, or
/// the `sleep: {seconds: N}` action.
fn pre_stop_sleep(pre_stop: &Json) -> f64 {
    assert!(!pre_stop.is_null(), "the container has no preStop hook");
    if let Some(s) = pre_stop["sleep"]["seconds"].as_f64() {
        return s;
    }
    let cmd: Vec<&str> = pre_stop["exec"]["command"]
        .as_array()
        .unwrap_or_else(|| panic!("preStop is neither exec nor sleep: {pre_stop:?}"))
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let line = cmd.join(" ");
    let n = line
        .split("sleep")
        .nth(1)
        .unwrap_or_else(|| panic!("preStop does not sleep: {line:?}"))
        .trim();
    n.trim_matches(|c| c == '"' || c == '\'')
        .parse()
        .unwrap_or_else(|_| panic!("preStop sleep {n:?} is not a number of seconds"))
}

/// `--print-config` output as flag -> value.
fn printed_config(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (k, rest) = l.split_once(" = ")?;
            let v = rest.strip_prefix('"')?;
            let end = v.rfind('"')?;
            Some((k.trim().to_string(), v[..end].to_string()))
        })
        .collect()
}

#[test]
fn kubernetes_manifest_fits_together_and_its_arguments_parse() {
    let Some(venv) = test_venv() else { return };
    let docs = load_yaml_all(&venv, &repo().join("docs/deploy/kubernetes.yaml"));
    let of_kind = |kind: &str| -> Vec<&Json> {
        docs.iter()
            .filter(|d| d["kind"].as_str() == Some(kind))
            .collect()
    };
    let (deployments, services) = (of_kind("Deployment"), of_kind("Service"));
    assert_eq!(deployments.len(), 1, "one Deployment");
    assert_eq!(services.len(), 1, "one Service");
    let (dep, svc) = (deployments[0], services[0]);
    assert_eq!(dep["apiVersion"].as_str(), Some("apps/v1"));
    assert_eq!(svc["apiVersion"].as_str(), Some("v1"));

    // Selectors match the pod template's labels.
    let pod = &dep["spec"]["template"];
    let labels = str_map(&pod["metadata"]["labels"], "template labels");
    assert_subset(
        &str_map(&dep["spec"]["selector"]["matchLabels"], "matchLabels"),
        &labels,
        "the Deployment's selector",
    );
    assert_subset(
        &str_map(&svc["spec"]["selector"], "Service selector"),
        &labels,
        "the Service's selector",
    );

    let containers = pod["spec"]["containers"].as_array().unwrap();
    let c = containers
        .iter()
        .find(|c| c["name"].as_str() == Some("m0serve"))
        .expect("a container named m0serve");

    // The command line: the image's ENTRYPOINT is m0serve, so `args` alone, or a
    // `command` that starts with m0serve. Every item a string (the API refuses numbers).
    let strings = |j: &Json, what: &str| -> Vec<String> {
        j.as_array()
            .map(|a| {
                a.iter()
                    .map(|v| {
                        v.as_str()
                            .unwrap_or_else(|| panic!("{what}: {v:?} is not a string"))
                            .to_string()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut argv = strings(&c["command"], "command");
    if let Some(first) = argv.first() {
        assert!(
            first == "m0serve" || first.ends_with("/m0serve"),
            "command {argv:?}"
        );
        argv.remove(0);
    }
    argv.extend(strings(&c["args"], "args"));
    assert!(!argv.is_empty(), "the container has no arguments");
    let env: Vec<(String, String)> = c["env"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap().to_string(),
                        e["value"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();

    // The real binary reads them: a misspelt flag or a bad value fails here.
    let run = |extra: &[&str], more_env: &[(&str, &str)]| {
        let mut args: Vec<&str> = argv.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        let mut e: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        e.extend_from_slice(more_env);
        run_to_exit(&args, &e, Duration::from_secs(30))
    };
    let out = run(&["--print-config"], &[]);
    assert!(
        out.status.success(),
        "m0serve {argv:?} --print-config: {}{}",
        out.stdout,
        out.stderr
    );
    let config = printed_config(&out.stdout);
    // The image's app directory is /app, holding examples/: --check-config imports the
    // app from there, with every value checked as at a real start.
    let examples = repo().join("examples");
    let out = run(
        &["--check-config"],
        &[("M0SERVE_APP_DIR", examples.to_str().unwrap())],
    );
    assert!(
        out.status.success()
            && format!("{}{}", out.stdout, out.stderr).contains("configuration OK"),
        "m0serve {argv:?} --check-config: {}{}",
        out.stdout,
        out.stderr
    );

    // Listening on every interface, on the container's port.
    assert_eq!(config["--host"], "0.0.0.0", "{config:?}");
    let app_port: u16 = config["--port"].parse().unwrap();
    let mut named = BTreeMap::new();
    let mut declared = Vec::new();
    for p in c["ports"].as_array().expect("container ports") {
        let n = p["containerPort"].as_f64().unwrap() as u16;
        declared.push(n);
        if let Some(name) = p["name"].as_str() {
            named.insert(name.to_string(), n);
        }
    }
    assert!(
        declared.contains(&app_port),
        "--port {app_port} is not a containerPort ({declared:?})"
    );
    assert_ne!(
        config["--forwarded-allow-ips"], "127.0.0.1,::1",
        "behind a Service the proxy is not on localhost: set --forwarded-allow-ips"
    );

    // Readiness on the metrics port's /readyz (503 while the pod sheds), liveness on its
    // /healthz: the loop answers both without the app.
    let metrics_port: u16 = config["--metrics-port"]
        .parse()
        .expect("--metrics-port is set");
    assert!(
        declared.contains(&metrics_port),
        "--metrics-port {metrics_port} is not a containerPort ({declared:?})"
    );
    assert_eq!(
        config["--metrics-address"], "0.0.0.0",
        "the kubelet probes the pod's address"
    );
    assert_eq!(
        probe_port(&c["livenessProbe"], &named, "livenessProbe"),
        metrics_port
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        probe_port(&c["readinessProbe"], &named, "readinessProbe"),
        metrics_port
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    let ann = &pod["metadata"]["annotations"];
    assert_eq!(
        ann["prometheus.io/port"].as_str(),
        Some(metrics_port.to_string().as_str())
    );
    assert_eq!(ann["prometheus.io/path"].as_str(), Some("/metrics"));
    let svc_ports = svc["spec"]["ports"].as_array().expect("Service ports");
    assert!(!svc_ports.is_empty());
    for p in svc_ports {
        let target = if p["targetPort"].is_null() {
            &p["port"]
        } else {
            &p["targetPort"]
        };
        assert_eq!(
            resolve_port(target, &named, "Service targetPort"),
            app_port,
            "the Service's targetPort"
        );
    }

    // Stopping: SIGTERM after the preStop sleep, the drain within --graceful-timeout, and
    // the master's kill 5 s later, all before the kubelet's SIGKILL.
    let pre_stop = pre_stop_sleep(&c["lifecycle"]["preStop"]);
    let graceful: f64 = config["--graceful-timeout"].parse().unwrap();
    let grace = pod["spec"]["terminationGracePeriodSeconds"]
        .as_f64()
        .expect("terminationGracePeriodSeconds");
    assert!(pre_stop > 0.0, "preStop sleeps {pre_stop} s");
    assert!(
        grace > pre_stop + graceful + 5.0,
        "terminationGracePeriodSeconds {grace} must exceed the preStop sleep {pre_stop} + \
         --graceful-timeout {graceful} + the master's 5 s"
    );

    // Resources: requests and limits, CPU and memory.
    for kind in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(
                !c["resources"][kind][r].is_null(),
                "resources.{kind}.{r} is not set"
            );
        }
    }
}

#[test]
fn the_autoscaler_scales_the_deployment_on_a_metric_the_adapter_makes_from_real_series() {
    let Some(venv) = test_venv() else { return };
    let docs = load_yaml_all(
        &venv,
        &repo().join("docs/deploy/kubernetes-autoscaling.yaml"),
    );
    let of_kind = |kind: &str| -> Vec<&Json> {
        docs.iter()
            .filter(|d| d["kind"].as_str() == Some(kind))
            .collect()
    };
    let (hpas, maps) = (of_kind("HorizontalPodAutoscaler"), of_kind("ConfigMap"));
    assert_eq!(
        (hpas.len(), maps.len()),
        (1, 1),
        "one HPA and the adapter's ConfigMap"
    );
    let hpa = hpas[0];
    assert_eq!(hpa["apiVersion"].as_str(), Some("autoscaling/v2"));

    // It scales the Deployment of kubernetes.yaml.
    let manifest = load_yaml_all(&venv, &repo().join("docs/deploy/kubernetes.yaml"));
    let dep = manifest
        .iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .expect("the Deployment");
    let target = &hpa["spec"]["scaleTargetRef"];
    assert_eq!(target["kind"].as_str(), Some("Deployment"));
    assert_eq!(target["apiVersion"], dep["apiVersion"]);
    assert_eq!(target["name"], dep["metadata"]["name"]);
    let (min, max) = (
        hpa["spec"]["minReplicas"].as_f64().unwrap(),
        hpa["spec"]["maxReplicas"].as_f64().unwrap(),
    );
    assert!(1.0 <= min && min < max, "replicas {min}..{max}");

    // On a per-pod custom metric, which the adapter's one rule names.
    let metrics = hpa["spec"]["metrics"].as_array().expect("metrics");
    assert_eq!(metrics.len(), 1);
    assert_eq!(metrics[0]["type"].as_str(), Some("Pods"));
    let wanted = metrics[0]["pods"]["metric"]["name"].as_str().unwrap();
    let target = metrics[0]["pods"]["target"]["averageValue"]
        .as_str()
        .unwrap();
    assert_eq!(target, "50m", "a quantity in seconds: 50 ms");
    let config = maps[0]["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml");
    let file = std::env::temp_dir().join(format!("m0s-adapter-{}.yaml", std::process::id()));
    std::fs::write(&file, config).unwrap();
    let adapter = load_yaml_all(&venv, &file);
    let _ = std::fs::remove_file(&file);
    let rules = adapter[0]["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 1);
    let rule = &rules[0];
    assert_eq!(rule["name"]["as"].as_str(), Some(wanted));
    for (what, label) in [("namespace", "namespace"), ("pod", "pod")] {
        assert_eq!(
            rule["resources"]["overrides"][label]["resource"].as_str(),
            Some(what)
        );
    }

    // The series the rule reads are ones m0serve exports.
    let query = format!(
        "{} {}",
        rule["seriesQuery"].as_str().unwrap(),
        rule["metricsQuery"].as_str().unwrap()
    );
    let named: Vec<&str> = query
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("m0serve_"))
        .collect();
    assert!(named.len() >= 3, "{query}");
    let s = Server::builder("hello:app")
        .args(&["--metrics-port", "0"])
        .start();
    let addr = s.metrics_addr();
    assert_eq!(s.get("/").status, 200);
    let mut c = Conn::connect(addr);
    c.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let text = c.read_response().body_text();
    for series in named {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{series} "))),
            "the adapter reads {series}, which m0serve does not export:\n{text}"
        );
    }
}

#[test]
fn the_systemd_unit_runs_the_virtualenvs_m0serve_with_arguments_that_parse() {
    // The notify protocol and socket activation are tested by tests/systemd.rs; this checks
    // the recipe's files: ExecStart is a virtualenv's console script, its arguments are
    // accepted by the real program, and the stop timeout exceeds the drain.
    for f in ["m0serve.service", "m0serve.socket"] {
        let p = repo().join("docs/deploy").join(f);
        assert!(p.is_file(), "{} is missing", p.display());
    }
    let unit = std::fs::read_to_string(repo().join("docs/deploy/m0serve.service")).unwrap();
    let value = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in m0serve.service"))
            .to_string()
    };
    let exec = value("ExecStart");
    let mut words = exec.split_whitespace();
    let program = words.next().unwrap();
    assert!(program.ends_with("/.venv/bin/m0serve"), "ExecStart={exec}");
    let args: Vec<&str> = words.chain(["--print-config"]).collect();
    let out = run_to_exit(&args, &[], Duration::from_secs(10));
    assert!(out.status.success(), "{args:?}: {}", out.stderr);
    let config = printed_config(&out.stdout);
    let graceful: f64 = config["--graceful-timeout"].parse().unwrap();
    let stop: f64 = value("TimeoutStopSec").parse().unwrap();
    assert!(
        stop > graceful,
        "TimeoutStopSec={stop} <= --graceful-timeout {graceful}"
    );
}

/// The Dockerfile's instructions (continuation lines joined, comments dropped), each as
/// (INSTRUCTION, arguments).
fn dockerfile() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && current.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(t);
                let (ins, args) = current.split_once(' ').unwrap_or((&current, ""));
                out.push((ins.to_ascii_uppercase(), args.trim().to_string()));
                current.clear();
            }
        }
    }
    out
}

/// A Dockerfile JSON array (`["m0serve", "hello:app"]`).
fn exec_form(args: &str, what: &str) -> Vec<String> {
    Json::parse(args)
        .unwrap_or_else(|e| panic!("{what} {args}: not a JSON array ({e})"))
        .as_array()
        .unwrap_or_else(|| panic!("{what} {args}: not an array"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_dockerfile_installs_the_wheel_for_its_python_and_its_command_checks() {
    let Some(venvs) = std::env::var("M0S_PACKAGE_VENVS")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        require(false, "M0S_PACKAGE_VENVS (scripts/test.sh sets it)");
        return;
    };
    let wheels =
        PathBuf::from(std::env::var("M0S_WHEELS").expect("M0S_WHEELS with M0S_PACKAGE_VENVS"));
    let ins = dockerfile();
    let get = |name: &str| -> Vec<&String> {
        ins.iter()
            .filter(|(i, _)| i == name)
            .map(|(_, a)| a)
            .collect()
    };
    // One stage, on a base given as a build argument whose default is the slim image of
    // one Python version.
    let from = get("FROM");
    assert_eq!(from.len(), 1, "{from:?}");
    assert_eq!(from[0], "${BASE_IMAGE}", "FROM takes ARG BASE_IMAGE");
    let base = get("ARG")
        .into_iter()
        .find_map(|a| a.strip_prefix("BASE_IMAGE="))
        .expect("ARG BASE_IMAGE=... with a default");
    let version = base
        .strip_prefix("python:")
        .and_then(|t| t.strip_suffix("-slim"))
        .unwrap_or_else(|| panic!("ARG BASE_IMAGE={base}: expected python:3.X-slim"));
    let venv = venvs
        .split_whitespace()
        .map(PathBuf::from)
        .find(|v| v.ends_with(version))
        .unwrap_or_else(|| panic!("no package virtualenv for Python {version} in {venvs}"));

    // The wheel comes from dist/ (COPY), installed by pip without an index: pip, for the
    // image's Python, picks the manylinux wheel built for it.
    assert!(
        get("COPY").iter().any(|a| *a == "dist /tmp/dist"),
        "{ins:?}"
    );
    let run = get("RUN")
        .into_iter()
        .find(|r| r.contains("pip install"))
        .expect("a RUN with pip install");
    assert!(
        run.contains("python3 -m venv /opt/m0serve")
            && run.contains("/opt/m0serve/bin/pip install")
            && run.contains("--no-index --find-links /tmp/dist m0serve-wsgi"),
        "RUN {run}"
    );
    let report = std::env::temp_dir().join(format!("m0s-docker-pip-{}.json", std::process::id()));
    let out = Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--no-deps",
        ])
        .args(["--no-index", "--find-links"])
        .arg(&wheels)
        .args(["m0serve-wsgi", "--quiet", "--report"])
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pip: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let chosen = Json::parse(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let _ = std::fs::remove_file(&report);
    let url = chosen["install"][0]["download_info"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("pip chose nothing: {chosen:?}"))
        .to_string();
    let tag = format!("-cp{}-", version.replace('.', ""));
    assert!(
        url.contains(&tag) && url.contains("manylinux") && url.ends_with(".whl"),
        "pip for Python {version} chose {url}"
    );

    // Its environment, entrypoint and command, run from a virtualenv of that version (with
    // /app, the image's copy of examples/, as examples/ here): the configuration checks.
    let env_line = get("ENV").into_iter().next().expect("ENV").clone();
    let mut env: Vec<(String, String)> = env_line
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("ENV {kv}"));
            (k.to_string(), v.to_string())
        })
        .collect();
    assert!(
        env.iter().any(|(k, v)| k == "PYTHONUNBUFFERED" && v == "1"),
        "{env:?}"
    );
    // The virtualenv's scripts first on PATH: the entrypoint is its m0serve (run here as
    // the package virtualenv's).
    assert!(
        env.iter()
            .any(|(k, v)| k == "PATH" && v.starts_with("/opt/m0serve/bin:")),
        "{env:?}"
    );
    env.retain(|(k, _)| k != "PATH");
    for (k, v) in &mut env {
        if k == "M0SERVE_APP_DIR" {
            assert_eq!(v, "/app");
            *v = repo().join("examples").display().to_string();
        }
    }
    let entry = exec_form(get("ENTRYPOINT")[0], "ENTRYPOINT");
    let cmd = exec_form(get("CMD")[0], "CMD");
    assert_eq!(entry, ["m0serve"]);
    let out = Command::new(venv.join("bin").join(&entry[0]))
        .args(&cmd)
        .arg("--check-config")
        .env_remove("VIRTUAL_ENV")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout.contains("configuration OK")
            && stdout.contains("0.0.0.0:8000"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
