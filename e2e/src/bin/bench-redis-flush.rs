//! Benchmark driver: runs the `flush_intercom_sessions` action (plan, then apply) against a
//! Redis server, timing each phase.
//!
//! `bench-redis-flush CONFIG_JSON` with the action's config, e.g.
//! `{"redis": {"host": "127.0.0.1", "port": 6390}}`; the password (the `redis-password`
//! secret file) comes from `REDIS_PASSWORD` (empty: none). Runs the action as a real run does
//! (plan with apply following, then apply) and prints `plan_seconds`, `apply_seconds` and both
//! outcomes, one per line; exits 1 when a phase fails. With `DRY_RUN=1` it runs only a dry
//! run's plan (which counts) and prints `plan_seconds` and `plan_outcome`. With
//! `REDIS_PID` (a local server's process id) it also prints the CPU seconds the server spent
//! in each phase (`plan_server_cpu_seconds`, `apply_server_cpu_seconds`).
//!
//! `bench-redis-flush scan PORT PATTERN COUNT` walks the whole database once with `SCAN cursor
//! MATCH PATTERN COUNT n`, one call at a time (a verifying walk from one client), and prints
//! `scan_seconds` and `matched`.
//!
//! `bench-redis-flush ping PORT STOP_FILE` measures how long the server keeps others waiting:
//! it sends PING to 127.0.0.1:PORT over and over (one at a time, 1 ms apart) until STOP_FILE
//! exists, then prints `max_ms`, `p99_ms` and `samples`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use stagehand_actions::action::{ActionContext, RunIdentity, SecretValue, Secrets};

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [mode, port, stop] = args.as_slice()
        && mode == "ping"
    {
        return match ping(port, stop) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench-redis-flush ping: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if let [mode, port, pattern, count] = args.as_slice()
        && mode == "scan"
    {
        return match scan(port, pattern, count) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench-redis-flush scan: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let [config] = args.as_slice() else {
        eprintln!("usage: bench-redis-flush CONFIG_JSON   (password in REDIS_PASSWORD)");
        return std::process::ExitCode::from(2);
    };
    let config: serde_json::Value = match serde_json::from_str(config) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("bench-redis-flush: CONFIG_JSON: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match stagehand_e2e::bench_runtime("bench-redis-flush") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(run(&config)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-redis-flush: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(config: &serde_json::Value) -> Result<(), String> {
    let action = stagehand_actions::instantiate("flush_intercom_sessions", config)
        .map_err(|e| e.to_string())?;
    // The action does not talk to Kubernetes; a client that is never used (no cluster needed).
    let kube_config = kube::Config::new("http://127.0.0.1:9".parse().map_err(|e| format!("{e}"))?);
    let client = kube::Client::try_from(kube_config).map_err(|e| e.to_string())?;
    let password = std::env::var("REDIS_PASSWORD").unwrap_or_default();
    let dry_run = std::env::var("DRY_RUN").is_ok_and(|v| v == "1");
    let ctx = ActionContext {
        client,
        namespace: "bench".into(),
        secrets: Secrets::new([("redis-password".to_string(), SecretValue::new(password))]),
        object_store: None,
        run: RunIdentity {
            apply_follows: !dry_run,
            ..RunIdentity::default()
        },
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    };
    let server = std::env::var("REDIS_PID").ok();
    let cpu = || server.as_deref().and_then(server_cpu_seconds);
    let (c0, t0) = (cpu(), Instant::now());
    let plan = action.plan(&ctx).await.map_err(|e| format!("plan: {e}"))?;
    let (c1, t1) = (cpu(), Instant::now());
    if dry_run {
        println!("plan_seconds {:.3}", (t1 - t0).as_secs_f64());
        if let (Some(c0), Some(c1)) = (c0, c1) {
            println!("plan_server_cpu_seconds {:.2}", c1 - c0);
        }
        println!("plan_outcome {}", plan.summary);
        return Ok(());
    }
    let apply = action
        .apply(&ctx)
        .await
        .map_err(|e| format!("apply: {e}"))?;
    let (c2, t2) = (cpu(), Instant::now());
    println!("plan_seconds {:.3}", (t1 - t0).as_secs_f64());
    println!("apply_seconds {:.3}", (t2 - t1).as_secs_f64());
    if let (Some(c0), Some(c1), Some(c2)) = (c0, c1, c2) {
        println!("plan_server_cpu_seconds {:.2}", c1 - c0);
        println!("apply_server_cpu_seconds {:.2}", c2 - c1);
    }
    println!("plan_outcome {}", plan.summary);
    println!("apply_outcome {}", apply.summary);
    Ok(())
}

/// CPU time (user + system) the process `pid` has used, from /proc (clock ticks of 10 ms).
fn server_cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (in parentheses, which may hold spaces).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn ping(port: &str, stop: &str) -> Result<(), String> {
    let stream = TcpStream::connect(format!("127.0.0.1:{port}")).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let mut samples: Vec<Duration> = Vec::new();
    let mut line = String::new();
    while !std::path::Path::new(stop).exists() {
        let sent = Instant::now();
        writer
            .write_all(b"*1\r\n$4\r\nPING\r\n")
            .map_err(|e| e.to_string())?;
        line.clear();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
        if !line.starts_with("+PONG") {
            return Err(format!("PING answered {line:?}"));
        }
        samples.push(sent.elapsed());
        std::thread::sleep(Duration::from_millis(1));
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let max = samples.last().copied().unwrap_or_default();
    let p99 = samples
        .get(samples.len().saturating_mul(99) / 100)
        .copied()
        .unwrap_or_default();
    println!("max_ms {:.2}", ms(max));
    println!("p99_ms {:.2}", ms(p99));
    println!("samples {}", samples.len());
    Ok(())
}

/// One RESP bulk string (`$<len>\r\n<bytes>\r\n`) from `reader`.
fn read_bulk(reader: &mut BufReader<TcpStream>, line: &mut String) -> Result<Vec<u8>, String> {
    line.clear();
    reader.read_line(line).map_err(|e| e.to_string())?;
    let len: usize = line
        .trim_end()
        .strip_prefix('$')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("expected a bulk string, got {line:?}"))?;
    let mut buf = vec![0u8; len + 2];
    std::io::Read::read_exact(reader, &mut buf).map_err(|e| e.to_string())?;
    buf.truncate(len);
    Ok(buf)
}

fn scan(port: &str, pattern: &str, count: &str) -> Result<(), String> {
    let stream = TcpStream::connect(format!("127.0.0.1:{port}")).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut cursor = b"0".to_vec();
    let mut matched = 0u64;
    let started = Instant::now();
    loop {
        let mut request = Vec::new();
        let args: [&[u8]; 6] = [
            b"SCAN",
            &cursor,
            b"MATCH",
            pattern.as_bytes(),
            b"COUNT",
            count.as_bytes(),
        ];
        request.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            request.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            request.extend_from_slice(a);
            request.extend_from_slice(b"\r\n");
        }
        writer.write_all(&request).map_err(|e| e.to_string())?;
        line.clear();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.trim_end() != "*2" {
            return Err(format!("SCAN answered {line:?}"));
        }
        cursor = read_bulk(&mut reader, &mut line)?;
        line.clear();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
        let keys: u64 = line
            .trim_end()
            .strip_prefix('*')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("expected the keys, got {line:?}"))?;
        for _ in 0..keys {
            read_bulk(&mut reader, &mut line)?;
        }
        matched += keys;
        if cursor == b"0" {
            break;
        }
    }
    println!("scan_seconds {:.3}", started.elapsed().as_secs_f64());
    println!("matched {matched}");
    Ok(())
}
