//! The output: the run's figures as one JSON object on stdout (scripts/bench.py parses
//! it).

use std::time::Duration;

use crate::conn::Conn;
use crate::run::{Run, GRACE};
use crate::schedule::Schedule;
use crate::stall_probe::{outside_stalls, Stalls};
use crate::stats::percentile_of;
use crate::target::{Target, QUIET_STEAL};

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The run's figures as one JSON object: one target's, or with several (`--switch`),
/// `{"rate", "switch", "targets": [...]}` with each target's in the order given.
pub fn report(run: &Run, secs: f64) -> String {
    let n = run.targets.len();
    // Unsent requests were due when the run ended: they fall in the last turn.
    let unsent = run
        .schedule
        .as_ref()
        .map(|s| (s.total - s.next, (s.turn_of(s.next) % n as u64) as usize));
    let per: Vec<String> = (0..n)
        .map(|t| {
            let conns = &run.conns[t * run.per_target..(t + 1) * run.per_target];
            // With several targets each had the schedule for its turns only.
            let active = secs / n as f64;
            let sent = run.targets[t].counts.send_lag.count;
            let unsent = unsent.map(|(u, at)| if at == t { u } else { 0 });
            target_report(
                &run.targets[t],
                conns,
                active,
                sent,
                unsent,
                run.schedule.as_ref(),
                run.stalls.as_ref(),
            )
        })
        .collect();
    match (&run.schedule, per.as_slice()) {
        (Some(s), _) if s.switch.is_some() => format!(
            "{{\"rate\": {}, \"switch\": {}, \"targets\": [{}]}}",
            s.rate,
            s.switch.map_or(0.0, |d| d.as_secs_f64()),
            per.join(", ")
        ),
        (_, [one]) => one.clone(),
        _ => unreachable!("several targets need --switch"),
    }
}

fn target_report(
    t: &Target,
    conns: &[Option<Conn>],
    secs: f64,
    sent: u64,
    unsent: Option<u64>,
    schedule: Option<&Schedule>,
    stalls: Option<&Stalls>,
) -> String {
    let c = &t.counts;
    // Requests outstanding for over 2 s at the end count as timeouts, as wrk counts them.
    let timeout = conns
        .iter()
        .flatten()
        .filter(|c| c.outstanding && c.due_at.elapsed() > GRACE)
        .count();
    let mut out = format!(
        "{{\"url\": {}, \"requests\": {}, \"seconds\": {:.3}, \"rps\": {:.1}, \"bytes\": {}, \
         \"non_2xx\": {}, \"errors\": {{\"connect\": {}, \"read\": {}, \"write\": {}, \
         \"timeout\": {}, \"protocol\": {}}}, \"first_protocol_error\": {}, \
         \"latency_avg_ms\": {:.3}, \"latency_p50_ms\": {:.3}, \"latency_p90_ms\": {:.3}, \
         \"latency_p99_ms\": {:.3}, \"latency_p999_ms\": {:.3}, \"latency_max_ms\": {:.3}",
        json_str(&t.url),
        c.requests,
        secs,
        c.requests as f64 / secs,
        c.bytes,
        c.non_2xx,
        c.connect,
        c.read,
        c.write,
        timeout,
        c.protocol,
        c.first_protocol_error
            .as_deref()
            .map_or("null".to_string(), json_str),
        c.latency.avg_ms(),
        c.latency.percentile_ms(50.0),
        c.latency.percentile_ms(90.0),
        c.latency.percentile_ms(99.0),
        c.latency.percentile_ms(99.9),
        c.latency.max_us as f64 / 1000.0,
    );
    if let Some(s) = schedule {
        out.push_str(&format!(
            ", \"rate\": {}, \"warmup_requests\": {}, \"sent\": {}, \"unsent\": {}, \
             \"send_lag_p50_ms\": {:.3}, \"send_lag_p99_ms\": {:.3}, \"send_lag_max_ms\": {:.3}",
            s.rate,
            t.warmup_requests,
            sent,
            unsent.unwrap_or(0),
            c.send_lag.percentile_ms(50.0),
            c.send_lag.percentile_ms(99.0),
            c.send_lag.max_us as f64 / 1000.0,
        ));
    }
    // With the probe: the requests due outside the host's stalls, by turn too.
    let kept = stalls
        .zip(t.log.as_deref())
        .map(|(st, log)| outside_stalls(log, &st.spans));
    let mut kept_by_turn: std::collections::HashMap<u64, Vec<u32>> = Default::default();
    if let (Some(kept), Some(s)) = (&kept, schedule.filter(|s| s.switch.is_some())) {
        for &(due, us) in kept {
            kept_by_turn.entry(s.turn_at(due)).or_default().push(us);
        }
    }
    if let (Some(stalls), Some(log), Some(kept)) = (stalls, t.log.as_deref(), &kept) {
        let mut kept: Vec<u32> = kept.iter().map(|&(_, us)| us).collect();
        let ms = |us: u32| us as f64 / 1000.0;
        let lengths = stalls.spans.iter().map(|&(s, e)| e - s);
        out.push_str(&format!(
            ", \"outside_stalls\": {{\"requests\": {}, \"excluded\": {:.4}, \
             \"p50_ms\": {:.3}, \"p90_ms\": {:.3}, \"p99_ms\": {:.3}, \"p999_ms\": {:.3}}}, \
             \"host_stalls\": {{\"count\": {}, \"total_ms\": {:.3}, \"max_ms\": {:.3}, \
             \"realtime\": {}, \"run_delay\": {}, \"probe_waited_ms\": {:.3}}}",
            kept.len(),
            1.0 - kept.len() as f64 / log.len().max(1) as f64,
            ms(percentile_of(&mut kept, 50.0)),
            ms(percentile_of(&mut kept, 90.0)),
            ms(percentile_of(&mut kept, 99.0)),
            ms(percentile_of(&mut kept, 99.9)),
            stalls.spans.len(),
            lengths.clone().sum::<Duration>().as_secs_f64() * 1000.0,
            lengths.max().unwrap_or_default().as_secs_f64() * 1000.0,
            stalls.realtime,
            stalls.run_delay,
            stalls.waited.as_secs_f64() * 1000.0,
        ));
    }
    if schedule.is_some_and(|s| s.switch.is_some()) {
        let turns: Vec<String> = t
            .turns
            .iter()
            .map(|u| {
                // The turn's p99 over its requests due outside the host's stalls (null
                // without the probe, or when every request of the turn was left out).
                let outside = kept_by_turn
                    .get_mut(&u.index)
                    .map_or("null".to_string(), |lat| {
                        format!("{:.3}", percentile_of(lat, 99.0) as f64 / 1000.0)
                    });
                format!(
                    "{{\"turn\": {}, \"requests\": {}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \
                     \"max_ms\": {:.3}, \"steal\": {}, \"p99_outside_ms\": {outside}}}",
                    u.index,
                    u.requests,
                    u.p50_us as f64 / 1000.0,
                    u.p99_us as f64 / 1000.0,
                    u.max_us as f64 / 1000.0,
                    u.steal.map_or("null".to_string(), |x| format!("{x:.4}")),
                )
            })
            .collect();
        out.push_str(&format!(
            ", \"quiet\": {{\"turns\": {}, \"requests\": {}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \
             \"p999_ms\": {:.3}, \"max_ms\": {:.3}}}, \"turns\": [{}]",
            t.turns
                .iter()
                .filter(|u| u.steal.is_some_and(|s| s < QUIET_STEAL))
                .count(),
            t.quiet.count,
            t.quiet.percentile_ms(50.0),
            t.quiet.percentile_ms(99.0),
            t.quiet.percentile_ms(99.9),
            t.quiet.max_us as f64 / 1000.0,
            turns.join(", ")
        ));
    }
    out.push('}');
    out
}
