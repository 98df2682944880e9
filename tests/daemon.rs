//! The worker daemon through the real binary and real sockets: many concurrent clients,
//! SIGKILL mid-way, stale sockets, build replacement, idle exit, start races, malformed
//! messages, subscriptions, SIGTERM and the peer uid check.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::TestDb;
use common::daemon::{Raw, alive, signal};
use redb::ReadableTable;
use serde_json::{Value, json};

fn socket_path(db: &TestDb) -> PathBuf {
    common::daemon::socket_path(db).expect("the daemon's socket")
}

fn daemon_pid(db: &TestDb) -> Option<u32> {
    let v = db.json(&["daemon", "status"]);
    v["daemon"]["pid"].as_u64().map(|p| p as u32)
}

/// A fresh database with `fact` learned through its daemon, and that daemon's pid.
fn with_daemon(fact: &str) -> (TestDb, u32) {
    let db = TestDb::new();
    db.learn(&[fact]);
    let pid = daemon_pid(&db).expect("a daemon runs");
    (db, pid)
}

/// Wait for `pid` to be gone, and say so. The limit is generous: a SIGKILLed process exits
/// only once its threads' in-flight disk I/O is done, which a loaded machine can stretch to
/// seconds.
fn wait_gone(pid: u32) {
    assert!(
        common::daemon::wait_gone(pid, Duration::from_secs(60)),
        "process {pid} is still running 60 s later; its threads: {}",
        common::daemon::describe_threads(pid)
    );
}

/// Start the database's daemon through a client run with the setting `var` = `value` in its
/// environment (the daemon it starts inherits it); its pid.
fn daemon_with(db: &TestDb, var: &str, value: &str, args: &[&str]) -> u32 {
    db.cmd().env(var, value).args(args).assert().success();
    daemons_of(db)[0]
}

/// The processes running `kbdb … daemon` for this database.
fn daemons_of(db: &TestDb) -> Vec<u32> {
    let dir = db.dir.to_str().unwrap().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == "daemon") && args.contains(&dir) && alive(pid) {
            out.push(pid);
        }
    }
    out
}

/// 16 clients, 90 % reads and 10 % writes, for `secs`; optionally SIGKILL the daemon mid-way.
/// Returns (acknowledged and still wanted kbids, failures as (operation, message)).
fn hammer(
    db: &Arc<TestDb>,
    secs: u64,
    kill_at: Option<Duration>,
) -> (Vec<String>, Vec<(String, String)>) {
    db.learn(&["seed section about nebula clusters", "--docid", "seed"]);
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let failures = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for c in 0..16 {
        let (db, acked, failures, stop) =
            (db.clone(), acked.clone(), failures.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut mine: Vec<String> = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let (op, args): (&str, Vec<String>) = match n % 10 {
                    0 => (
                        "learn",
                        vec![
                            "learn".into(),
                            format!("client {c} fact {n} nebula"),
                            "--docid".into(),
                            format!("c/{c}"),
                        ],
                    ),
                    5 if mine.len() > 3 => ("unlearn", vec!["unlearn".into(), mine.remove(0)]),
                    1 | 4 | 7 if !mine.is_empty() => (
                        "recall",
                        vec![
                            "recall".into(),
                            mine[mine.len() - 1].clone(),
                            "--depth".into(),
                            "1".into(),
                        ],
                    ),
                    2 => ("status", vec!["status".into()]),
                    _ => (
                        "search",
                        vec![
                            "search".into(),
                            "nebula".into(),
                            "--limit".into(),
                            "5".into(),
                        ],
                    ),
                };
                let out = db
                    .cmd()
                    .args(&args)
                    .args(["--format", "json"])
                    .output()
                    .unwrap();
                if !out.status.success() {
                    let msg = String::from_utf8_lossy(&out.stdout).into_owned();
                    failures.lock().unwrap().push((op.to_string(), msg));
                    continue;
                }
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                match op {
                    "learn" => mine.push(v["kbid"].as_str().unwrap().to_string()),
                    "unlearn" => assert_eq!(v["removed"], true),
                    _ => {}
                }
            }
            acked.lock().unwrap().extend(mine);
        }));
    }
    let start = Instant::now();
    if let Some(at) = kill_at {
        std::thread::sleep(at);
        let pid = daemon_pid(db).expect("a daemon runs");
        signal(pid, libc::SIGKILL);
        wait_gone(pid);
    }
    std::thread::sleep(Duration::from_secs(secs).saturating_sub(start.elapsed()));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let failures = failures.lock().unwrap().clone();
    (acked, failures)
}

fn assert_all_present_and_check_clean(db: &TestDb, acked: &[String]) {
    assert!(!acked.is_empty());
    for chunk in acked.chunks(50) {
        let mut args = vec!["recall"];
        args.extend(chunk.iter().map(String::as_str));
        let out = db
            .cmd()
            .args(&args)
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "acknowledged sections missing: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let out = db
        .cmd()
        .args(["check", "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "check: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn sixteen_clients_mixing_reads_and_writes_see_no_errors() {
    let db = Arc::new(TestDb::new());
    let (acked, failures) = hammer(&db, 8, None);
    assert!(failures.is_empty(), "{failures:?}");
    assert_all_present_and_check_clean(&db, &acked);
    assert_eq!(daemons_of(&db).len(), 1, "one daemon served everyone");
}

#[test]
fn a_daemon_killed_mid_way_loses_no_acknowledged_write() {
    let db = Arc::new(TestDb::new());
    let (acked, failures) = hammer(&db, 8, Some(Duration::from_secs(3)));
    // Reads are retried on a fresh daemon; only a write in flight at the kill may fail, and it
    // says so.
    for (op, msg) in &failures {
        assert!(
            matches!(op.as_str(), "learn" | "unlearn") && msg.contains("stopped before answering"),
            "{op}: {msg}"
        );
    }
    assert!(failures.len() <= 16, "{failures:?}");
    assert_all_present_and_check_clean(&db, &acked);
    assert_eq!(
        daemons_of(&db).len(),
        1,
        "the next client started exactly one new daemon"
    );
}

/// The bytes of the database's write journal (0 when it does not exist).
fn journal_bytes(db: &TestDb) -> u64 {
    std::fs::metadata(db.dir.join("kbdb.journal")).map_or(0, |m| m.len())
}

#[test]
fn writes_a_killed_daemon_held_only_in_its_journal_come_back() {
    let db = TestDb::new();
    // No checkpoint during the test: after a daemon's first write, every write is only in the
    // journal (and in the daemon's memory) until it stops.
    let start = |fact: &str| {
        daemon_with(
            &db,
            "KBDB_DAEMON_JOURNAL_CHECKPOINT_MS",
            "600000",
            &["learn", fact, "--tag", "journal"],
        )
    };
    let pid = start("journal fact 0");
    let mut kbids = Vec::new();
    for i in 1..12 {
        let r = db.learn(&[
            &format!("journal fact {i}"),
            "--tag",
            "journal",
            "--docid",
            "j/doc",
        ]);
        kbids.push(r["kbid"].as_str().unwrap().to_string());
    }
    db.json(&["unlearn", &kbids[3]]);
    assert!(
        journal_bytes(&db) > 0,
        "the writes went through the journal"
    );
    // A clean stop makes them durable in redb and leaves nothing to replay.
    db.stop_daemon();
    wait_gone(pid);
    assert_eq!(journal_bytes(&db), 0, "a clean stop empties the journal");
    let pid = start("journal fact 12");
    db.learn(&["journal fact 13", "--docid", "j/doc"]);
    assert!(journal_bytes(&db) > 0);
    signal(pid, libc::SIGKILL);
    wait_gone(pid);
    // The next client starts a daemon, whose open replays the journal.
    assert_eq!(db.status()["sections"], 13);
    let doc = db.json(&["retrieve", "--docid", "j/doc"]);
    assert_eq!(doc["kbids"].as_array().unwrap().len(), 11, "{doc}");
    assert_eq!(db.json(&["search", "journal fact"])["total"], 13);
    assert_eq!(db.json(&["check"])["ok"], true);
    let log = std::fs::read_to_string(db.dir.join("daemon.log")).unwrap();
    assert_eq!(
        log.matches("replayed the write journal").count(),
        1,
        "{log}"
    );
}

#[test]
fn a_daemon_without_the_journal_commits_each_group_in_redb() {
    let db = TestDb::new();
    let pid = daemon_with(
        &db,
        "KBDB_DAEMON_JOURNAL",
        "false",
        &["learn", "redb fact 0"],
    );
    for i in 1..5 {
        db.learn(&[&format!("redb fact {i}")]);
    }
    assert_eq!(journal_bytes(&db), 0);
    signal(pid, libc::SIGKILL);
    wait_gone(pid);
    assert_eq!(db.status()["sections"], 5);
    assert_eq!(db.json(&["check"])["ok"], true);
}

#[test]
fn a_stale_socket_is_replaced() {
    let (db, pid) = with_daemon("stale socket fact");
    signal(pid, libc::SIGKILL);
    wait_gone(pid);
    assert!(
        socket_path(&db).exists(),
        "SIGKILL leaves the socket file behind"
    );
    // Nothing listens on it any more. A connect once succeeded right after the daemon's threads
    // were all gone (the cause is not pinned down): allow a moment, and if it lasts, name the
    // daemons of this database.
    let deadline = Instant::now() + Duration::from_secs(5);
    while UnixStream::connect(socket_path(&db)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "something still listens on the dead daemon's socket 5 s later; daemons of this \
             database: {:?}",
            daemons_of(&db)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(db.status()["sections"], 1);
    let new = daemon_pid(&db).unwrap();
    assert_ne!(new, pid);
}

#[test]
fn a_daemon_of_another_build_is_asked_to_stop_and_replaced() {
    let db = TestDb::new();
    db.status();
    let sock = socket_path(&db);
    db.stop_daemon();
    // An "old" daemon: answers hello with another build, stops when asked.
    let listener = UnixListener::bind(&sock).unwrap();
    let got_shutdown = Arc::new(AtomicBool::new(false));
    // A pid that no longer runs, as the old daemon's.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let old = {
        let (got, sock) = (got_shutdown.clone(), sock.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let stream = stream.unwrap();
                let mut w = stream.try_clone().unwrap();
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    let req: Value = serde_json::from_str(&line).unwrap();
                    let result = match req["method"].as_str() {
                        Some("hello") => {
                            json!({"version": "0.0.1", "build": "0.0.1/1-1 config=0", "pid": gone_pid, "db": "x"})
                        }
                        Some("shutdown") => {
                            got.store(true, Ordering::SeqCst);
                            json!({"stopping": true})
                        }
                        _ => json!(null),
                    };
                    // The client may hang up first (after hello): not an error here.
                    let _ = writeln!(
                        w,
                        "{}",
                        json!({"jsonrpc": "2.0", "id": req["id"], "result": result})
                    );
                    if got.load(Ordering::SeqCst) {
                        std::fs::remove_file(&sock).unwrap();
                        return;
                    }
                }
            }
        })
    };
    assert_eq!(db.status()["sections"], 0);
    old.join().unwrap();
    assert!(got_shutdown.load(Ordering::SeqCst));
    let info = db.json(&["daemon", "status"]);
    assert_ne!(info["daemon"]["version"], "0.0.1");
}

#[test]
fn an_idle_daemon_exits() {
    let db = TestDb::new();
    let pid = daemon_with(&db, "KBDB_DAEMON_IDLE_SECS", "1", &["status"]);
    wait_gone(pid);
    assert!(!socket_path_exists(&db));
}

fn socket_path_exists(db: &TestDb) -> bool {
    std::fs::read_dir(db.runtime_dir())
        .map(|d| {
            d.flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "sock"))
        })
        .unwrap_or(false)
}

#[test]
fn clients_racing_to_start_the_daemon_start_exactly_one() {
    let db = TestDb::new();
    let children: Vec<_> = (0..8)
        .map(|_| {
            db.process()
                .args(["status", "--format", "json"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
    }
    assert_eq!(daemons_of(&db).len(), 1);
}

/// Writers racing on a database that does not exist yet (`learn --jsonl` through the daemon,
/// as a script starting 8 loaders at once): the one that creates the database holds it open
/// for a moment, and a client that started the daemon meanwhile got a daemon that could not
/// open it ("in use by another process") and failed. Every writer must succeed, through one
/// daemon.
#[test]
fn writers_racing_on_a_new_database_all_succeed_through_one_daemon() {
    for round in 0..3 {
        let db = TestDb::uninit();
        let children: Vec<_> = (0..8)
            .map(|w| {
                let mut c = db
                    .process()
                    .args(["--format", "json", "learn", "--jsonl"])
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                let lines: String = (0..20)
                    .map(|i| {
                        let line = json!({
                            "content": format!("round {round} writer {w} line {i} about racing starts"),
                            "docid": format!("w/{w}"),
                        });
                        format!("{line}\n")
                    })
                    .collect();
                // A writer that failed may be gone already: its error is asserted below.
                let _ = c.stdin.take().unwrap().write_all(lines.as_bytes());
                c
            })
            .collect();
        for (w, c) in children.into_iter().enumerate() {
            let out = c.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "round {round}, writer {w}: {}\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let results: Vec<Value> = stdout
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(results.len(), 20, "round {round}, writer {w}: {stdout}");
            assert!(
                results.iter().all(|r| r.get("error").is_none()),
                "round {round}, writer {w}: {stdout}"
            );
        }
        assert_eq!(db.status()["sections"], 160, "round {round}");
        assert_eq!(daemons_of(&db).len(), 1, "round {round}");
    }
}

#[test]
fn malformed_and_oversized_messages_get_errors_and_the_daemon_lives_on() {
    let db = TestDb::new();
    db.status();
    let mut raw = Raw::connect(&db);
    raw.send(b"this is not json");
    assert_eq!(raw.read().unwrap()["error"]["code"], -32700);
    let v = raw.call_json(json!({"jsonrpc": "2.0", "id": 1, "method": "no_such_method"}));
    assert_eq!(v["error"]["code"], -32601);
    let v = raw
        .call_json(json!({"jsonrpc": "2.0", "id": 2, "method": "learn", "params": {"bogus": 1}}));
    assert_eq!(v["error"]["code"], -32602);
    let v = raw.call_json(json!({"id": 3, "method": "status"}));
    assert_eq!(v["error"]["code"], -32600, "jsonrpc 2.0 is required");
    let v = raw.call_json(
        json!({"jsonrpc": "2.0", "id": 4, "method": "learn", "params": {"content": ""}}),
    );
    assert_eq!(v["error"]["code"], -32000);
    assert_eq!(v["error"]["data"]["field"], "content");
    let v = raw.call_json(json!({"jsonrpc": "2.0", "id": 5, "method": "status"}));
    assert_eq!(v["id"], 5);
    assert_eq!(v["result"]["sections"], 0);

    // A line over the limit: an error, then the connection closes.
    let big = vec![b'x'; 65 * 1024 * 1024];
    let mut raw = Raw::connect(&db);
    raw.send(&big);
    let v = raw.read().expect("an error before closing");
    assert_eq!(v["error"]["code"], -32600);
    assert!(v["error"]["message"].as_str().unwrap().contains("exceeds"));
    // The daemon still serves everyone else.
    assert_eq!(db.status()["sections"], 0);
}

/// Removes a folder that another process may be writing files into at the same moment.
fn remove_dir_while_written(dir: &std::path::Path) {
    for _ in 0..100 {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(e) => panic!("removing {}: {e}", dir.display()),
        }
    }
    panic!("{} kept getting new files", dir.display());
}

#[test]
fn an_index_folder_deleted_under_the_daemon_is_rebuilt() {
    let db = TestDb::new();
    db.json(&["learn", "alpha beta gamma", "--title", "First"]);
    let pid = daemon_pid(&db).expect("a daemon");
    // `check` brings the index up to date; the daemon's indexer or tantivy's merge threads may
    // still write a file into the folder while it is being removed, so the removal is retried.
    assert_eq!(db.json(&["check"])["ok"], true);
    remove_dir_while_written(&db.dir.join("index"));
    db.json(&["learn", "delta epsilon zeta", "--title", "Second"]);
    // The same daemon finds what was learned before and after the deletion.
    for (query, heading) in [("gamma", "First"), ("zeta", "Second")] {
        let r = db.json(&["search", query]);
        assert_eq!(r["items"][0]["heading"], heading, "{query}: {r}");
    }
    assert_eq!(db.json(&["check"])["ok"], true);
    assert!(db.dir.join("index/lexical/meta.json").exists());
    assert_eq!(daemon_pid(&db), Some(pid), "the daemon was restarted");
}

/// The daemon turns transparent huge pages off for itself (docs/decisions.md): the kernel
/// reports it in the process status (Linux 6.x; an older kernel has no such line).
#[test]
fn the_daemon_runs_without_transparent_huge_pages() {
    let db = TestDb::new();
    db.status();
    let pid = daemon_pid(&db).expect("a daemon");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    if let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) {
        assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
    }
}

#[test]
fn subscribers_are_told_of_changes() {
    let db = TestDb::new();
    // A change made before subscribing is not sent.
    let earlier = db.learn(&["an earlier change", "--docid", "old"])["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    let mut raw = Raw::connect(&db);
    let v = raw.call_json(json!({"jsonrpc": "2.0", "id": 1, "method": "subscribe"}));
    assert_eq!(v["result"]["subscribed"], true);
    let kbid = db.learn(&["a change worth hearing about", "--docid", "news"])["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    let mut events = Vec::new();
    while events.len() < 2 {
        let v = raw.read().expect("a change event");
        assert_eq!(v["method"], "changed");
        events.push((
            v["params"]["kind"].as_str().unwrap().to_string(),
            v["params"]["id"].as_str().unwrap().to_string(),
        ));
    }
    assert!(
        events.contains(&("section_added".to_string(), kbid.clone())),
        "{events:?}"
    );
    assert!(
        events.contains(&("document_changed".to_string(), "news".to_string())),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|(_, id)| id == &earlier || id == "old"),
        "{events:?}"
    );
}

#[test]
fn a_search_right_after_a_learn_finds_it_while_the_indexer_gathers_groups() {
    // The daemon's indexer feeds the lexical index some milliseconds after a write is
    // acknowledged; a search on the same connection right after must still find it.
    let db = TestDb::new();
    db.learn(&["a first fact, so that the daemon runs"]);
    let mut raw = Raw::connect(&db);
    for i in 0..20 {
        let word = format!("zirconium{i}");
        let learned = raw.call_json(json!({"jsonrpc": "2.0", "id": 2 * i, "method": "learn",
            "params": {"content": format!("a fact about {word} crystals")}}));
        let kbid = learned["result"]["kbid"].as_str().unwrap().to_string();
        let found = raw.call_json(json!({"jsonrpc": "2.0", "id": 2 * i + 1,
            "method": "search", "params": {"query": word}}));
        assert_eq!(found["result"]["total"], 1, "{found}");
        assert_eq!(
            found["result"]["items"][0]["kbid"],
            kbid.as_str(),
            "{found}"
        );
    }
}

#[test]
fn sigterm_stops_the_daemon_gracefully_and_embedded_mode_is_refused_while_it_runs() {
    let db = TestDb::new();
    let kbid = db.learn(&["kept across a graceful stop"])["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    let out = db.cmd().args(["--embedded", "status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kbdb daemon stop"));
    // The environment variable asks for the same, in the spellings scripts use.
    for value in ["1", "true"] {
        let out = db
            .cmd()
            .env("KBDB_EMBEDDED", value)
            .arg("status")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(5), "KBDB_EMBEDDED={value}");
    }
    // 0 means through the daemon, as without it.
    let out = db
        .cmd()
        .env("KBDB_EMBEDDED", "0")
        .arg("status")
        .output()
        .unwrap();
    assert!(out.status.success(), "KBDB_EMBEDDED=0");

    let pid = daemon_pid(&db).unwrap();
    signal(pid, libc::SIGTERM);
    wait_gone(pid);
    assert!(
        !socket_path_exists(&db),
        "a graceful stop removes its socket"
    );
    let log = std::fs::read_to_string(db.dir.join("daemon.log")).unwrap();
    assert!(log.contains("daemon stopped"), "{log}");
    // Embedded mode works now that no daemon holds the database.
    let out = db
        .cmd()
        .args(["--embedded", "retrieve", "--kbid", &kbid])
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn a_client_of_another_user_is_refused() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("skipped: needs root to run a client as another user");
        return;
    }
    let db = TestDb::new();
    db.status();
    let sock = socket_path(&db);
    // Open the file-system permissions so only the daemon's peer check stands in the way.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(db.runtime_dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let script = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.settimeout(10)\ntry:\n    s.connect({:?})\n    s.sendall(b'{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"status\"}}\\n')\n    print('answer' if s.recv(100) else 'closed')\nexcept (ConnectionResetError, BrokenPipeError):\n    print('closed')\n",
        sock.to_str().unwrap()
    );
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "closed",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_to_string(db.dir.join("daemon.log"))
            .unwrap()
            .contains("another user")
    );
    // The owner is still served.
    assert_eq!(db.status()["sections"], 0);
}

#[test]
fn a_client_with_another_runtime_folder_finds_the_running_daemon() {
    // An MCP host often starts servers with a bare environment (no XDG_RUNTIME_DIR), while
    // the user's terminal has one: both must reach the same daemon.
    let (db, pid) = with_daemon("shared between environments");
    let other_runtime = db.tmp.path().join("other-run");
    let out = common::kbdb_cmd()
        .env("KBDB_RUNTIME_DIR", &other_runtime)
        .args([
            "--db",
            db.dir.to_str().unwrap(),
            "status",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sections"], 1);
    assert_eq!(daemons_of(&db), vec![pid], "no second daemon");
    // Stopping from the other environment stops it too, and forgets the record.
    common::kbdb_cmd()
        .env("KBDB_RUNTIME_DIR", &other_runtime)
        .args(["--db", db.dir.to_str().unwrap(), "daemon", "stop"])
        .assert()
        .success();
    assert!(!alive(pid));
    assert!(!db.dir.join("daemon.endpoint").exists());
}

#[test]
fn init_on_a_database_its_daemon_holds_just_reports_it() {
    let db = TestDb::new();
    db.learn(&["held by the daemon"]);
    assert!(daemon_pid(&db).is_some());
    let v = db.json(&["init"]);
    assert_eq!(v["created"], false);
    assert_eq!(db.status()["sections"], 1);
}

#[test]
fn a_full_group_leaves_the_next_writes_for_the_following_commit_and_loses_none() {
    // Groups of at most 3 writes; writers of 2 at once, so a queued job regularly does not fit
    // into the group being formed and must wait for the next one (the daemon logs it).
    let db = TestDb::new();
    let status = db
        .cmd()
        .env("KBDB_MAX_BATCH", "3")
        .env("KBDB_LOG", "kbdb=debug")
        .args(["status", "--format", "json"])
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let sock = socket_path(&db);
    let writers = 6;
    let mut carried = 0;
    let mut acked: Vec<String> = Vec::new();
    // Rounds until a carried job has been seen (practically the first).
    for round in 0..20 {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let sock = sock.clone();
                std::thread::spawn(move || {
                    let mut rpc = common::daemon::Rpc::connect(&sock, Duration::from_secs(60))
                        .expect("connect");
                    let mut kbids = Vec::new();
                    for i in 0..25 {
                        let requests: Vec<Value> = (0..2)
                            .map(|k| json!({"content": format!("round {round} writer {w} write {i} part {k}")}))
                            .collect();
                        match rpc.call("learn_many", json!({"requests": requests})) {
                            common::daemon::Reply::Ok(v) => {
                                for r in v.as_array().expect("one result per write") {
                                    kbids.push(r["ok"]["kbid"].as_str().unwrap_or_else(|| panic!("{r}")).to_string());
                                }
                            }
                            other => panic!("writer {w}: {other:?}"),
                        }
                    }
                    kbids
                })
            })
            .collect();
        for h in handles {
            acked.extend(h.join().unwrap());
        }
        let log = std::fs::read_to_string(db.dir.join("daemon.log")).unwrap();
        let groups: Vec<&str> = log.lines().filter(|l| l.contains("group commit")).collect();
        let field = |line: &str, name: &str| -> Option<String> {
            let rest = line.split(&format!(" {name}=")).nth(1)?;
            Some(rest.split_whitespace().next()?.to_string())
        };
        let mut written = 0;
        carried = 0;
        for g in &groups {
            let n: usize = field(g, "writes").and_then(|n| n.parse().ok()).expect(g);
            assert!(n <= 3, "a group of {n} writes over the limit of 3: {g}");
            written += n;
            // Jobs left for the next group.
            carried += usize::from(field(g, "waiting").is_some_and(|n| n != "0"));
        }
        assert_eq!(
            written,
            acked.len(),
            "every acknowledged write was in one group"
        );
        if carried > 0 {
            break;
        }
    }
    assert!(carried > 0, "no job ever waited for the next group");
    assert_eq!(
        acked.len(),
        acked.iter().collect::<std::collections::HashSet<_>>().len()
    );
    let mut rpc = common::daemon::Rpc::connect(&sock, Duration::from_secs(60)).unwrap();
    match rpc.call("status", json!({})) {
        common::daemon::Reply::Ok(v) => assert_eq!(v["sections"], acked.len()),
        other => panic!("{other:?}"),
    }
    for kbid in &acked {
        match rpc.call("recall", json!({"kbid": kbid})) {
            common::daemon::Reply::Ok(_) => {}
            other => panic!("{kbid}: {other:?}"),
        }
    }
}

#[test]
fn a_large_log_is_moved_aside_when_a_daemon_starts() {
    let db = TestDb::new();
    db.stop_daemon();
    let log = db.dir.join("daemon.log");
    let old = db.dir.join("daemon.log.1");
    // A log just over the 8 MiB limit.
    let line = "2026-01-01T00:00:00Z  INFO kbdb: an old line\n";
    let mut big = String::new();
    while big.len() < 8 * 1024 * 1024 {
        big.push_str(line);
    }
    std::fs::write(&log, &big).unwrap();
    db.status();
    assert_eq!(
        std::fs::read_to_string(&old).unwrap(),
        big,
        "the old log is kept whole"
    );
    let new = std::fs::read_to_string(&log).unwrap();
    assert!(new.contains("daemon started"), "{new}");
    assert!(!new.contains("an old line"), "{new}");
    // A small log stays where it is.
    db.stop_daemon();
    db.status();
    let again = std::fs::read_to_string(&log).unwrap();
    assert_eq!(again.matches("daemon started").count(), 2, "{again}");
    assert_eq!(std::fs::metadata(&old).unwrap().len(), big.len() as u64);
}

#[test]
fn a_start_that_fails_right_after_the_log_moved_aside_reports_what_it_logged() {
    let db = TestDb::new();
    db.stop_daemon();
    std::fs::write(
        db.dir.join("daemon.log"),
        "an old line\n".repeat(8 * 1024 * 1024 / 12 + 1),
    )
    .unwrap();
    // An embedded process holds the database, so the daemon a client starts fails at once —
    // and the lines it logged are in the new, short log.
    let holder = db.hold_embedded();
    let out = db.cmd().arg("status").output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("exited at start") && err.contains("in use by another process"),
        "{err}"
    );
    assert!(db.dir.join("daemon.log.1").exists());
    assert!(holder.release());
}

#[test]
fn daemon_status_tells_what_the_daemon_did_and_where_it_listens_and_logs() {
    let db = TestDb::new();
    db.stop_daemon();
    assert_eq!(db.json(&["daemon", "status"])["running"], false);
    for fact in ["status fact one", "status fact two", "status fact three"] {
        db.learn(&[fact]);
    }
    let _listener = Raw::connect(&db);
    // This `daemon status` and the connection above; the learns' connections close as their
    // processes exit, which the daemon notices a moment later.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let v = db.json(&["daemon", "status"]);
        if v["daemon"]["activity"]["clients"] == 2 || Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status["running"], true);
    let a = &status["daemon"]["activity"];
    assert_eq!(a["clients"], 2, "{status}");
    assert_eq!(a["max_clients"], 512, "the default limit: {status}");
    assert_eq!(a["subscribers"], 0, "{status}");
    assert_eq!(a["writes"], 3, "{status}");
    assert_eq!(a["write_groups"], 3, "one learn at a time: {status}");
    assert_eq!(a["socket"], socket_path(&db).to_str().unwrap());
    assert_eq!(a["log"], db.dir.join("daemon.log").to_str().unwrap());
    assert!(a["uptime_secs"].as_u64().is_some(), "{status}");
    let out = db.cmd().args(["daemon", "status"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("3 writes in 3 group commits"), "{text}");
    // (How many clients: the JSON above; the previous status's connection may not be closed yet.)
    assert!(
        text.contains("clients connected of at most 512 (0 subscribed to changes)"),
        "{text}"
    );
}

#[test]
fn a_daemon_out_of_threads_refuses_new_clients_clearly_and_serves_the_others() {
    let (db, pid) = with_daemon("a fact learned before the limit");
    let mut before = Raw::connect(&db);
    // Answered once, so that its connection thread exists before the limit (a connection the
    // daemon has not accepted yet would be refused like the others).
    let v = before.call_json(json!({"jsonrpc": "2.0", "id": 6, "method": "hello"}));
    assert!(v["result"].is_object(), "{v}");
    let Some(limit) = common::daemon::PidsLimit::freeze_threads_of(pid) else {
        eprintln!("skipped: this machine lets no test limit a process's threads (cgroup v1 pids)");
        return;
    };
    // Every client the daemon cannot make a thread for is told why; none is mistaken for a
    // missing daemon (no second daemon is started).
    for _ in 0..3 {
        let out = db.cmd().arg("status").output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("refused this client") && err.contains("cannot serve another client"),
            "{err}"
        );
    }
    // The daemon lives on, and serves the client it had.
    assert!(alive(pid));
    let v = before.call_json(json!({"jsonrpc": "2.0", "id": 7, "method": "status"}));
    assert_eq!(v["result"]["sections"], 1, "{v}");
    // The refused clients are not counted as connected (else the daemon would never be idle):
    // only this one is, once the earlier CLI connections have closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = before.call_json(json!({"jsonrpc": "2.0", "id": 8, "method": "hello"}));
        if v["result"]["activity"]["clients"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(limit);
    assert_eq!(db.status()["sections"], 1);
    assert_eq!(daemon_pid(&db), Some(pid), "the same daemon serves again");
}

#[test]
fn a_daemon_at_its_client_limit_refuses_one_more_clearly_and_serves_it_once_one_leaves() {
    let db = TestDb::new();
    let pid = daemon_with(
        &db,
        "KBDB_DAEMON_MAX_CLIENTS",
        "2",
        &["learn", "a fact learned before the crowd"],
    );
    // The learn's connection closes as its process exits, which the daemon notices a moment
    // later: one connection, then wait until it is the only one.
    let mut first = Raw::connect(&db);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = first.call_json(json!({"jsonrpc": "2.0", "id": 1, "method": "hello"}));
        if v["result"]["activity"]["clients"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut second = Raw::connect(&db);
    let v = second.call_json(json!({"jsonrpc": "2.0", "id": 2, "method": "hello"}));
    assert_eq!(v["result"]["activity"]["clients"], 2, "{v}");
    let mut connected = vec![first, second];
    // A third client is told why, whoever it is: a raw connection gets the error and the end
    // of the stream, the CLI exits 5 naming the setting, and no second daemon is started.
    let mut third = Raw::connect(&db);
    let refusal = third
        .read()
        .expect("a refusal before the end of the stream");
    let msg = refusal["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("limit of 2 clients (daemon.max_clients)"),
        "{refusal}"
    );
    assert_eq!(third.read(), None, "then it is closed");
    let out = db.cmd().arg("status").output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused this client") && err.contains("daemon.max_clients"),
        "{err}"
    );
    assert_eq!(daemons_of(&db), [pid]);
    // The connected clients go on; once one leaves, the next is served.
    let v = connected[0].call_json(json!({"jsonrpc": "2.0", "id": 9, "method": "status"}));
    assert_eq!(v["result"]["sections"], 1, "{v}");
    let v = connected[0].call_json(json!({"jsonrpc": "2.0", "id": 10, "method": "hello"}));
    assert_eq!(v["result"]["activity"]["max_clients"], 2, "{v}");
    drop(connected.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = db.cmd().arg("status").output().unwrap();
        if out.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Served by the same daemon (asked on the connection it kept: the status client's own
    // connection may not be counted out yet).
    let v = connected[0].call_json(json!({"jsonrpc": "2.0", "id": 11, "method": "hello"}));
    assert_eq!(v["result"]["pid"], pid, "{v}");
    assert_eq!(daemons_of(&db), [pid]);
}

/// Voluntary context switches of every thread of `pid` so far.
fn voluntary_switches(pid: u32) -> u64 {
    let mut n = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        n += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    n
}

#[test]
fn an_idle_daemon_sleeps_without_waking_and_still_stops_at_once() {
    let db = TestDb::new();
    let pid = daemon_with(
        &db,
        "KBDB_DAEMON_IDLE_SECS",
        "60",
        &["learn", "a fact before the quiet"],
    );
    // Once its last work is done, nothing wakes it: no thread switches in a 2 s window (a
    // polling loop would wake it 10 times a second).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let before = voluntary_switches(pid);
        std::thread::sleep(Duration::from_secs(2));
        let woken = voluntary_switches(pid) - before;
        if woken == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the idle daemon still woke {woken} times in 2 s"
        );
    }
    // A stop request, and SIGTERM, still reach the sleeping accept loop — also while another
    // client stays connected (the last client leaving wakes the loop too).
    let _other = Raw::connect(&db);
    db.stop_daemon();
    assert!(!alive(pid), "`daemon stop` waits until the daemon is gone");
    let pid = daemon_with(&db, "KBDB_DAEMON_IDLE_SECS", "60", &["status"]);
    let _other = Raw::connect(&db);
    signal(pid, libc::SIGTERM);
    wait_gone(pid);
    assert!(
        !socket_path_exists(&db),
        "a stopped daemon removes its socket"
    );
}

#[test]
fn a_client_waits_for_a_silent_daemon_that_still_holds_the_database() {
    // A daemon that no longer answers but has not exited yet (a SIGKILLed one finishing its disk
    // writes; here: stopped, its socket gone) still holds the database. The next client waits for
    // it instead of starting a daemon that could not open the database.
    let (db, old) = with_daemon("a fact held by the silent daemon");
    signal(old, libc::SIGSTOP);
    std::fs::remove_file(socket_path(&db)).unwrap();
    let mut client = db
        .process()
        .args(["status", "--format", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        client.try_wait().unwrap().is_none(),
        "the client waits while the old daemon holds the database"
    );
    signal(old, libc::SIGKILL);
    let out = client.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["sections"], 1);
    let new = daemon_pid(&db).unwrap();
    assert_ne!(new, old);
}

#[test]
fn a_client_gives_up_on_a_silent_daemon_after_its_wait_and_names_it() {
    let (db, old) = with_daemon("a fact held by a daemon that never answers again");
    signal(old, libc::SIGSTOP);
    std::fs::remove_file(socket_path(&db)).unwrap();
    let started = Instant::now();
    let out = db
        .process()
        .arg("status")
        .env("KBDB_SILENT_DAEMON_WAIT_SECS", "1")
        .output()
        .unwrap();
    let waited = started.elapsed();
    signal(old, libc::SIGKILL);
    wait_gone(old);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(
        stderr.starts_with("error: a kbdb daemon of ")
            && stderr.contains(&format!(
                "(pid {old}) holds the database but has neither answered nor exited within 1s \
             (daemon.silent_daemon_wait_secs); stop it (kill {old})"
            )),
        "{stderr}"
    );
    assert!(
        waited >= Duration::from_secs(1),
        "it waited its second first ({waited:?})"
    );
    // Once the old daemon is gone, the next client starts a new one; nothing was lost.
    assert_eq!(db.json(&["status"])["sections"], 1);
}

/// `n` learns through `rpc`, in `learn_many` batches of 250: all acknowledged.
fn learn_batches(rpc: &mut common::daemon::Rpc, tag: &str, n: usize) {
    for batch in 0..n.div_ceil(250) {
        let count = 250.min(n - batch * 250);
        let requests: Vec<Value> = (0..count)
            .map(|i| json!({"content": format!("{tag} fact {batch} {i}")}))
            .collect();
        match rpc.call("learn_many", json!({"requests": requests})) {
            common::daemon::Reply::Ok(v) => assert_eq!(v.as_array().unwrap().len(), count),
            other => panic!("batch {batch}: {other:?}"),
        }
    }
}

fn hello(rpc: &mut common::daemon::Rpc) -> Value {
    match rpc.call("hello", json!({})) {
        common::daemon::Reply::Ok(v) => v,
        other => panic!("{other:?}"),
    }
}

#[test]
fn stalled_subscribers_never_hold_up_writes_and_are_dropped_once_too_far_behind() {
    let db = TestDb::new();
    daemon_with(
        &db,
        "KBDB_DAEMON_SUBSCRIBER_MAX_BEHIND",
        "2000",
        &["learn", "a fact before the subscriptions"],
    );
    // Eight subscribers that never read their events (MCP servers suspended with Ctrl-Z).
    let mut stalled: Vec<Raw> = (0..8)
        .map(|_| {
            let mut r = Raw::connect(&db);
            let v = r.call_json(json!({"jsonrpc": "2.0", "id": 1, "method": "subscribe"}));
            assert_eq!(v["result"]["subscribed"], true);
            r
        })
        .collect();
    // 1,500 events: far more than their socket buffers hold (a few hundred small writes), less
    // than they may lag behind. Every write is acknowledged while all eight are still
    // subscribed: nothing waited on their sockets (events used to be written by the writer
    // thread, 2 s per full socket, and those subscribers dropped).
    let mut rpc = common::daemon::Rpc::connect(&socket_path(&db), Duration::from_secs(60)).unwrap();
    learn_batches(&mut rpc, "stalled", 1500);
    let v = hello(&mut rpc);
    assert_eq!(v["activity"]["subscribers"], 8, "{v}");
    // 2,500 more: now more than 2,000 behind, each is dropped (its connection closed), and
    // writes go on.
    learn_batches(&mut rpc, "behind", 2500);
    match rpc.call("status", json!({})) {
        common::daemon::Reply::Ok(v) => assert_eq!(v["sections"], 4001),
        other => panic!("{other:?}"),
    }
    assert_eq!(hello(&mut rpc)["activity"]["subscribers"], 0);
    // A dropped subscriber reads what was written before, then the end of its stream: it
    // subscribes again (the MCP server does, and says changes may have been missed).
    for s in &mut stalled {
        let mut lines = 0;
        loop {
            match s.read_line_raw() {
                Ok(Some(_)) => lines += 1,
                Ok(None) => break,
                Err(e) => panic!("no end of stream after {lines} lines: {e}"),
            }
        }
        assert!(lines > 0, "it had events before it was dropped");
    }
}

#[test]
fn a_subscriber_gets_every_change_after_its_answer_in_order() {
    let db = TestDb::new();
    db.learn(&["a fact before the subscription"]);
    let mut sub = Raw::connect(&db);
    let v = sub.call_json(json!({"jsonrpc": "2.0", "id": 1, "method": "subscribe"}));
    assert_eq!(v["result"]["subscribed"], true);
    let mut rpc = common::daemon::Rpc::connect(&socket_path(&db), Duration::from_secs(60)).unwrap();
    learn_batches(&mut rpc, "followed", 600);
    let mut seqs = Vec::new();
    while seqs.len() < 600 {
        let v = sub.read().expect("an event");
        assert_eq!(v["method"], "changed", "{v}");
        seqs.push(v["params"]["seq"].as_u64().unwrap());
    }
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert_eq!(seqs[0], 2, "the first change after the subscription");
}

/// The offsets of the records at the start of a journal file (each `[len u32][seq u64][check
/// 8 bytes][payload]`), up to the first that does not fit.
fn journal_records(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 20 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if len == 0 || at + 20 + len > bytes.len() {
            break;
        }
        out.push((at, len));
        at += 20 + len;
    }
    out
}

#[test]
fn a_flipped_bit_in_the_journal_before_later_records_refuses_the_open_and_keeps_a_copy() {
    let db = TestDb::new();
    let pid = daemon_with(
        &db,
        "KBDB_DAEMON_JOURNAL_CHECKPOINT_MS",
        "600000",
        &["learn", "durable fact 0"],
    );
    for i in 1..10 {
        db.learn(&[&format!("journaled fact {i}")]);
    }
    signal(pid, libc::SIGKILL);
    wait_gone(pid);
    // One bit of the third record's payload: seven acknowledged writes after it.
    let path = db.dir.join("kbdb.journal");
    let mut bytes = std::fs::read(&path).unwrap();
    let records = journal_records(&bytes);
    assert!(records.len() >= 9, "{records:?}");
    let (at, len) = records[2];
    bytes[at + 20 + len / 2] ^= 0x04;
    std::fs::write(&path, &bytes).unwrap();
    // Refused (not opened with the two records before the damage and silently without the
    // seven after it), through the daemon and embedded, with the journal named.
    for embedded in [false, true] {
        let mut cmd = db.cmd();
        if embedded {
            cmd.arg("--embedded");
        }
        let out = cmd.args(["status", "--format", "json"]).output().unwrap();
        assert_eq!(out.status.code(), Some(9), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["error"]["code"], "damaged", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("kbdb.journal is damaged"), "{msg}");
        assert!(msg.contains("move") && msg.contains("kbdb check"), "{msg}");
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the journal is left as it was"
    );
    let copies: Vec<_> = std::fs::read_dir(&db.dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("kbdb.journal.damaged-")
        })
        .collect();
    assert_eq!(copies.len(), 1, "one copy, however many refused opens");
    assert_eq!(std::fs::read(copies[0].path()).unwrap(), bytes);
    // Moved aside as the message says: the database opens at its last checkpoint, and check
    // reports the copy.
    std::fs::rename(&path, db.dir.join("journal.aside")).unwrap();
    assert_eq!(db.status()["sections"], 1);
    let out = db
        .cmd()
        .args(["check", "--format", "json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false, "{v}");
    assert!(
        v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "journal_damaged"),
        "{v}"
    );
}

#[test]
fn a_journal_torn_at_its_tail_after_a_kill_still_replays_what_it_holds() {
    let db = TestDb::new();
    let pid = daemon_with(
        &db,
        "KBDB_DAEMON_JOURNAL_CHECKPOINT_MS",
        "600000",
        &["learn", "durable fact 0"],
    );
    for i in 1..6 {
        db.learn(&[&format!("journaled fact {i}")]);
    }
    signal(pid, libc::SIGKILL);
    wait_gone(pid);
    // The last record torn, as a kill mid-append leaves it: a normal end, no damage.
    let path = db.dir.join("kbdb.journal");
    let mut bytes = std::fs::read(&path).unwrap();
    let records = journal_records(&bytes);
    let (at, len) = records[records.len() - 1];
    bytes[at + 20 + len - 3] ^= 0x04;
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(db.status()["sections"], 5);
    assert_eq!(db.json(&["check"])["ok"], true);
}

#[test]
fn a_damaged_page_answers_damaged_and_the_daemon_serves_on() {
    let db = TestDb::new();
    let mut kbids = Vec::new();
    for i in 0..20 {
        let r = db.learn(&[&format!("page fact {i} about damaged pages")]);
        kbids.push(r["kbid"].as_str().unwrap().to_string());
    }
    db.stop_daemon();
    // A key of the sections table made invalid UTF-8 (with its other copies): redb panics on
    // it (`Result::unwrap()` on a Utf8Error) instead of returning an error.
    let file = db.dir.join("kbdb.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    let key = kbids[7].as_bytes();
    let hits: Vec<usize> = (0..bytes.len() - key.len())
        .filter(|&i| &bytes[i..i + key.len()] == key)
        .collect();
    assert!(!hits.is_empty());
    for at in hits {
        bytes[at + 5] = 0xff;
    }
    std::fs::write(&file, &bytes).unwrap();
    assert_eq!(db.status()["sections"], 20);
    let pid = daemon_pid(&db).expect("a daemon runs");
    // check reads every key: it reports the damage as a finding (exit 7), with the tables it
    // could not walk, instead of losing its connection.
    let out = db
        .cmd()
        .args(["check", "--format", "json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(7), "{v}");
    assert!(
        v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "damaged" && e["entity"].as_str().unwrap().contains("sections")),
        "{v}"
    );
    // `learn --jsonl`: every input line gets its result line, with its number; a write group
    // that failed fails each of its lines (it used to end the stream with one error line
    // without a line number, leaving the caller to guess what was stored).
    let out = db
        .cmd()
        .args(["learn", "--jsonl", "--format", "json"])
        .write_stdin("{\"content\":\"jsonl one\"}\nnot json\n{\"content\":\"jsonl three\"}\n")
        .output()
        .unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (i, v) in lines.iter().enumerate() {
        let numbered = v["line"] == json!(i + 1) && v["error"].is_object();
        assert!(numbered || v["kbid"].is_string(), "line {}: {v}", i + 1);
    }
    assert_eq!(lines[1]["error"]["code"], "invalid_input");
    assert_eq!(out.status.code(), Some(6));
    // Reads and writes after it are answered (successes or errors), never a lost connection.
    let calls: [&[&str]; 5] = [
        &["search", "page fact"],
        &["retrieve", "--kbid", &kbids[3]],
        &["learn", "a fact learned after the damage"],
        &["unlearn", &kbids[7]],
        &["status"],
    ];
    for args in calls {
        let out = db.cmd().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("lost the connection") && !err.contains("stopped before answering"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(daemon_pid(&db), Some(pid), "the same daemon serves on");
    assert_eq!(
        db.status()["sections"].as_u64().map(|n| n >= 20),
        Some(true)
    );
}

#[test]
fn content_that_fails_its_kbid_is_never_served() {
    let db = TestDb::new();
    let text = "The canary sentence of verification, stored once.";
    let kbid = db.learn(&[text, "--docid", "canary/doc"])["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    let other = db.learn(&["An intact neighbour of the canary."])["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    db.stop_daemon();
    // One letter of the stored content changed (still valid UTF-8: only the hash tells).
    let file = db.dir.join("kbdb.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    let needle = b"verification";
    let hits: Vec<usize> = (0..bytes.len() - needle.len())
        .filter(|&i| &bytes[i..i + needle.len()] == needle)
        .collect();
    assert!(!hits.is_empty());
    for at in hits {
        bytes[at] = b'V';
    }
    std::fs::write(&file, &bytes).unwrap();
    for embedded in [false, true] {
        let calls: [&[&str]; 5] = [
            &["retrieve", "--kbid", &kbid],
            &["content", &kbid],
            &["content", "canary/doc"],
            &["recall", &kbid],
            &["search", "canary"],
        ];
        for args in calls {
            let mut cmd = db.cmd();
            if embedded {
                cmd.arg("--embedded");
            }
            let out = cmd.args(args).args(["--format", "json"]).output().unwrap();
            let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            assert_eq!(
                out.status.code(),
                Some(9),
                "{args:?} embedded={embedded}: {v}"
            );
            assert_eq!(v["error"]["code"], "damaged", "{args:?}: {v}");
            let msg = v["error"]["message"].as_str().unwrap();
            // An open that must recover redb first (after a daemon that did not close the file
            // cleanly) verifies every page and meets the damage there: `damaged` too.
            let at_open = msg.contains("corrupted");
            assert!(msg.contains(&kbid) || at_open, "{args:?}: {msg}");
        }
        if embedded {
            continue;
        }
        // The intact section is served as ever; check names the damaged one.
        let v = db.json(&["retrieve", "--kbid", &other]);
        assert!(v.to_string().contains("intact neighbour"), "{v}");
        let out = db
            .cmd()
            .args(["check", "--format", "json"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["ok"], false, "{v}");
        assert!(v.to_string().contains(&kbid), "{v}");
        db.stop_daemon();
    }
}

#[test]
fn an_mcp_server_with_many_pipelined_calls_holds_a_few_daemon_connections() {
    let db = TestDb::new();
    for i in 0..20 {
        db.learn(&[&format!("pooled fact {i}")]);
    }
    let mut m = common::mcp::McpChild::start(&db);
    // 400 calls at once: each runs on a blocking task of its own, and used to open a daemon
    // connection of its own (up to the daemon's 512 slots, so the CLI was refused).
    for i in 0..400 {
        let call = json!({"jsonrpc": "2.0", "id": 10_000 + i, "method": "tools/call",
                          "params": {"name": "search", "arguments": {"query": "pooled fact"}}});
        m.send(call.to_string());
    }
    for i in 0..400 {
        let v = m.wait_for(|v| v["id"] == json!(10_000 + i));
        assert!(v["result"].is_object(), "{v}");
    }
    let status = db.json(&["daemon", "status"]);
    let peak = status["daemon"]["activity"]["peak_clients"]
        .as_u64()
        .unwrap();
    // The pool's connections, the MCP server's subscription, and this status call (which
    // probes the socket before it says hello; a connection is counted until its thread ends).
    assert_eq!(kbdb::daemon::pool::MAX_CONNECTIONS, 6);
    let most = 6 + 4;
    assert!(
        peak <= most,
        "{peak} connections at once (at most {most}): {status}"
    );
}

#[test]
fn a_peer_that_stalls_mid_message_is_dropped_and_an_idle_connection_closed() {
    let db = TestDb::new();
    daemon_with(
        &db,
        "KBDB_DAEMON_MESSAGE_TIMEOUT_SECS",
        "1",
        &["learn", "a fact before the slow peer"],
    );
    let mut slow = Raw::connect(&db);
    slow.send_raw(br#"{"jsonrpc": "2.0", "id": 1, "meth"#);
    let v = slow.read().expect("told why it is dropped");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("daemon.message_timeout_secs"), "{v}");
    assert!(slow.read().is_none(), "then closed");
    // A complete request on another connection is served as ever.
    assert_eq!(db.status()["sections"], 1);
    db.stop_daemon();

    daemon_with(
        &db,
        "KBDB_DAEMON_CONNECTION_IDLE_SECS",
        "1",
        &["learn", "a fact before the idle peer"],
    );
    let mut idle = Raw::connect(&db);
    let v = idle.call_json(json!({"jsonrpc": "2.0", "id": 1, "method": "hello"}));
    assert!(v["result"].is_object(), "{v}");
    // Nothing sent for a second: closed, without a word.
    assert!(idle.read().is_none());
    // A subscriber waits for events, for ever.
    let mut sub = Raw::connect(&db);
    let v = sub.call_json(json!({"jsonrpc": "2.0", "id": 1, "method": "subscribe"}));
    assert_eq!(v["result"]["subscribed"], true);
    std::thread::sleep(Duration::from_millis(2500));
    db.learn(&["a fact for the patient subscriber"]);
    let v = sub.read().expect("an event, not the end of the stream");
    assert_eq!(v["method"], "changed", "{v}");
}

#[test]
fn a_pooled_connection_the_daemon_closed_while_idle_is_replaced_before_a_write() {
    let db = TestDb::new();
    daemon_with(
        &db,
        "KBDB_DAEMON_CONNECTION_IDLE_SECS",
        "1",
        &["learn", "a fact before the pool"],
    );
    let mut m = common::mcp::McpChild::start(&db);
    m.tool_ok("learn", json!({"content": "a fact through the pool"}));
    std::thread::sleep(Duration::from_millis(2500));
    // Its idle connection was closed: the write goes to a new one and is applied once (not
    // "the daemon stopped before answering; it may or may not have been applied").
    m.tool_ok(
        "learn",
        json!({"content": "a fact through a replaced connection"}),
    );
    assert_eq!(db.status()["sections"], 3);
}

/// `kbdb ARGS --format json`, through the daemon or `--embedded`: (exit code, stdout as JSON).
fn run_json(db: &TestDb, embedded: bool, args: &[&str]) -> (Option<i32>, Value) {
    let mut cmd = db.cmd();
    if embedded {
        cmd.arg("--embedded");
    }
    let out = cmd.args(args).args(["--format", "json"]).output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        json!({"stdout": String::from_utf8_lossy(&out.stdout), "stderr": String::from_utf8_lossy(&out.stderr)})
    });
    (out.status.code(), v)
}

#[test]
fn links_planted_in_the_database_folder_are_never_followed() {
    let db = TestDb::new();
    db.learn(&["a fact before the links"]);
    db.stop_daemon();
    let victim = db.tmp.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    // The journal, then the database file, replaced by a link to a file of the user's: the
    // daemon used to write its records over the target, then truncate it.
    for name in ["kbdb.journal", "kbdb.redb"] {
        let path = db.dir.join(name);
        let aside = db.tmp.path().join(format!("{name}.aside"));
        std::fs::rename(&path, &aside).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        for embedded in [false, true] {
            let (code, v) = run_json(&db, embedded, &["learn", "a fact through a link"]);
            assert_eq!(code, Some(5), "{name} embedded={embedded}: {v}");
            assert_eq!(v["error"]["code"], "unsafe_folder", "{v}");
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(msg.contains(&format!("{name} is a symbolic link")), "{msg}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        std::fs::remove_file(&path).unwrap();
        std::fs::rename(&aside, &path).unwrap();
    }
    // The log: the daemon serves without it, and never appends to the link's target.
    let log = db.dir.join("daemon.log");
    let _ = std::fs::remove_file(&log);
    std::os::unix::fs::symlink(&victim, &log).unwrap();
    db.learn(&["a fact while the log is a link"]);
    assert_eq!(db.status()["sections"], 2);
    db.stop_daemon();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

#[test]
fn a_database_folder_other_users_can_write_is_refused_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::new();
    db.learn(&["a fact in a private folder"]);
    db.stop_daemon();
    let mode = |m: u32| std::fs::set_permissions(&db.dir, std::fs::Permissions::from_mode(m));
    for m in [0o777, 0o775, 0o757] {
        mode(m).unwrap();
        for embedded in [false, true] {
            let (code, v) = run_json(&db, embedded, &["status"]);
            assert_eq!(code, Some(5), "mode {m:o} embedded={embedded}: {v}");
            assert_eq!(v["error"]["code"], "unsafe_folder", "{v}");
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(msg.contains("chmod go-w"), "{msg}");
        }
    }
    // Sticky (others cannot replace or remove its files), then private again: served.
    mode(0o1777).unwrap();
    assert_eq!(db.status()["sections"], 1);
    db.stop_daemon();
    mode(0o755).unwrap();
    assert_eq!(db.status()["sections"], 1);
    db.stop_daemon();
    // Owned by another user (only root can make one here).
    if unsafe { libc::getuid() } == 0 {
        let c = std::ffi::CString::new(db.dir.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        let (code, v) = run_json(&db, true, &["status"]);
        assert_eq!(code, Some(5), "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("belongs to uid 65534"),
            "{v}"
        );
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 0, 0) }, 0);
    }
    // A new database is made so that others cannot write it, whatever the umask.
    let fresh = TestDb::uninit();
    let mut init = fresh.process();
    init.arg("init");
    // SAFETY: umask is async-signal-safe and cannot fail.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut init, || {
            libc::umask(0o002);
            Ok(())
        });
    }
    let out = init.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let m = std::fs::metadata(&fresh.dir).unwrap().permissions().mode();
    assert_eq!(m & 0o022, 0, "{m:o}");
}

#[test]
fn a_stopped_daemon_leaves_the_database_file_cleanly_shut() {
    // A file a process left open for writing is marked for recovery: the next open walks and
    // verifies every page (slow on a large file; a refusal when one page is damaged), and a
    // read-only open refuses it outright. A stopped daemon must close the file first, even
    // while the thread answering `daemon stop` still holds the database (a race: several
    // rounds).
    let db = TestDb::new();
    let file = db.dir.join("kbdb.redb");
    for round in 0..8 {
        for n in 0..5 {
            db.learn(&[&format!("fact {n} of round {round} about shutdown")]);
        }
        db.assert_checks_clean("before the stop");
        db.stop_daemon();
        let opened = redb::ReadOnlyDatabase::open(&file);
        assert!(
            opened.is_ok(),
            "round {round}: the file needs recovery after a clean stop: {:?}",
            opened.err()
        );
    }
}

#[test]
fn writes_sent_before_their_answers_are_answered_in_order_and_seen_by_what_follows() {
    let (db, _pid) = with_daemon("a fact before the pipelined writes");
    let mut raw = Raw::connect(&db);
    let batch = |b: usize| {
        let requests: Vec<Value> = (0..300)
            .map(|i| json!({"content": format!("pipelined batch {b} fact {i}"), "docid": "piped.md"}))
            .collect();
        json!({"jsonrpc": "2.0", "id": b + 1, "method": "learn_many", "params": {"requests": requests}})
    };
    // Everything in one go, before reading any answer: three batches, a write that fails its
    // validation, a read, one more write.
    let mut lines = String::new();
    for b in 0..3 {
        lines.push_str(&format!("{}\n", batch(b)));
    }
    lines.push_str(&format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": 4, "method": "learn", "params": {"content": ""}})
    ));
    lines.push_str(&format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": 5, "method": "status"})
    ));
    lines.push_str(&format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": 6, "method": "learn", "params": {"content": "the last pipelined fact"}})
    ));
    raw.send_raw(lines.as_bytes());
    let answers: Vec<Value> = (0..6).map(|_| raw.read().expect("an answer")).collect();
    let ids: Vec<u64> = answers.iter().map(|a| a["id"].as_u64().unwrap()).collect();
    assert_eq!(
        ids,
        [1, 2, 3, 4, 5, 6],
        "answers in the order of the requests"
    );
    for a in &answers[..3] {
        let items = a["result"].as_array().unwrap_or_else(|| panic!("{a}"));
        assert_eq!(items.len(), 300);
        assert!(items.iter().all(|i| i.get("ok").is_some()), "{a}");
    }
    assert!(
        answers[3]["error"]["data"]["field"] == "content",
        "{}",
        answers[3]
    );
    assert_eq!(
        answers[4]["result"]["sections"], 901,
        "the read sees the writes sent before it: {}",
        answers[4]
    );
    assert!(answers[5]["result"]["kbid"].is_string(), "{}", answers[5]);
    let docs = db.json(&["docs"]);
    assert!(docs.to_string().contains("piped.md"), "{docs}");
}

#[test]
fn small_writes_awaited_one_by_one_or_sent_at_once_get_their_own_answers_in_order() {
    let (db, _pid) = with_daemon("a fact before the small writes");
    let mut raw = Raw::connect(&db);
    let learn = |id: usize, content: &str| json!({"jsonrpc": "2.0", "id": id, "method": "learn", "params": {"content": content}});
    // Awaited one by one: each committed by the connection's own thread (nothing else writes).
    let mut kbids = Vec::new();
    for i in 0..5 {
        let content = format!("an awaited small write number {i}");
        let v = raw.call_json(learn(i + 1, &content));
        assert_eq!(v["id"], i + 1, "{v}");
        kbids.push((v["result"]["kbid"].as_str().unwrap().to_string(), content));
    }
    // Sent at once, before any answer: small, large (through the writer thread), small, small.
    let large: Vec<Value> = (0..100)
        .map(|i| json!({"content": format!("a write of the large batch number {i}")}))
        .collect();
    let mut lines = format!("{}\n", learn(10, "the first small write sent at once"));
    lines.push_str(&format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": 11, "method": "learn_many", "params": {"requests": large}})
    ));
    lines.push_str(&format!(
        "{}\n",
        learn(12, "the second small write sent at once")
    ));
    lines.push_str(&format!(
        "{}\n",
        learn(13, "the third small write sent at once")
    ));
    raw.send_raw(lines.as_bytes());
    let answers: Vec<Value> = (0..4).map(|_| raw.read().expect("an answer")).collect();
    let ids: Vec<u64> = answers.iter().map(|a| a["id"].as_u64().unwrap()).collect();
    assert_eq!(
        ids,
        [10, 11, 12, 13],
        "answers in the order of the requests"
    );
    assert_eq!(answers[1]["result"].as_array().unwrap().len(), 100);
    for (a, content) in [
        (&answers[0], "the first small write sent at once"),
        (&answers[2], "the second small write sent at once"),
        (&answers[3], "the third small write sent at once"),
    ] {
        kbids.push((
            a["result"]["kbid"].as_str().unwrap().to_string(),
            content.into(),
        ));
    }
    // Each answer names the section its own write stored.
    for (kbid, content) in &kbids {
        let v = db.json(&["retrieve", "--kbid", kbid]);
        assert_eq!(v[0]["content"], content.as_str(), "{v}");
    }
    let status = db.json(&["status"]);
    assert_eq!(status["sections"], 1 + 5 + 100 + 3, "{status}");
}

#[test]
fn a_daemon_killed_under_a_learn_stream_fails_only_the_batches_in_flight() {
    let (db, pid) = with_daemon("a fact before the stream");
    let mut child = db.spawn_learn_jsonl(false);
    let mut stdin = child.stdin.take().unwrap();
    // 3,000 lines answered; 1,000 sent to the daemon once it is suspended (in flight for sure
    // when it is killed); 1,000 after the kill.
    let (total, answered, in_flight) = (5000, 3000, 1000);
    let line =
        |i: usize| json!({"content": format!("streamed fact {i}: {}", "words ".repeat(i % 5 + 1))});
    let (next_tx, next) = std::sync::mpsc::channel::<()>();
    // Written from a thread of its own: the client's output is read here meanwhile.
    let writer = std::thread::spawn(move || {
        for i in 0..total {
            if i == answered || i == answered + in_flight {
                next.recv().unwrap();
            }
            writeln!(stdin, "{}", line(i)).unwrap();
        }
    });
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut results: Vec<String> = (&mut out).take(answered).map(|l| l.unwrap()).collect();
    assert!(
        results.iter().all(|l| l.contains("kbid")),
        "{:?}",
        results.last()
    );
    signal(pid, libc::SIGSTOP);
    next_tx.send(()).unwrap();
    // The client sends what it reads at once; the suspended daemon answers none of it.
    std::thread::sleep(Duration::from_secs(1));
    signal(pid, libc::SIGKILL);
    wait_gone(pid);
    // The rest of the stream goes to a daemon started anew (the client starts it).
    next_tx.send(()).unwrap();
    results.extend(out.map(|l| l.unwrap()));
    writer.join().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(results.len(), total, "one result line per input line");
    let failed: Vec<usize> = (0..total)
        .filter(|&i| results[i].contains("\"error\""))
        .collect();
    for &i in &failed {
        assert!(
            results[i].contains("may or may not have been applied"),
            "{}",
            results[i]
        );
        assert!(
            (answered..answered + in_flight).contains(&i),
            "line {} failed, not sent to the killed daemon: {}",
            i + 1,
            results[i]
        );
    }
    // Only what was in flight when the daemon died fails; the stream went on.
    assert!(!failed.is_empty(), "the kill came with no batch in flight");
    assert!(
        results[answered + in_flight..]
            .iter()
            .all(|l| l.contains("kbid")),
        "the lines after the kill were learned"
    );
    assert_eq!(status.code(), Some(6));
    // Every acknowledged line is there.
    let kbids: Vec<String> = results
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["kbid"].as_str().map(str::to_string))
        .collect();
    assert_all_present_and_check_clean(&db, &kbids);
}

#[test]
fn a_write_sent_behind_another_still_finds_the_near_duplicates_that_one_learned() {
    let (db, _pid) = with_daemon("a fact before the pipelined batches");
    let base: String = (0..120).map(|i| format!("token{i} ")).collect();
    let near = base.replace("token60 ", "changed ");
    // Filler so that the first batch takes the writer a while: the second is read and
    // prepared (without a near-duplicate scan) before the first commits.
    let mut first: Vec<Value> = (0..500)
        .map(|i| json!({"content": format!("filler fact {i} of the first batch")}))
        .collect();
    first.push(json!({"content": base}));
    let mut raw = Raw::connect(&db);
    let lines = format!(
        "{}\n{}\n",
        json!({"jsonrpc": "2.0", "id": 1, "method": "learn_many", "params": {"requests": first}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "learn_many", "params": {"requests": [{"content": near}]}}),
    );
    raw.send_raw(lines.as_bytes());
    let a = raw.read().expect("the first answer");
    let b = raw.read().expect("the second answer");
    assert_eq!((a["id"].as_u64(), b["id"].as_u64()), (Some(1), Some(2)));
    let base_kbid = &a["result"][500]["ok"]["kbid"];
    assert!(base_kbid.is_string(), "{a}");
    let found = &b["result"][0]["ok"]["near_duplicates"];
    assert_eq!(found.as_array().map(Vec::len), Some(1), "{b}");
    assert_eq!(&found[0]["kbid"], base_kbid);
}

#[test]
fn a_learn_stream_whose_daemon_stops_answering_fails_that_batch_and_goes_on_once_it_answers() {
    let (db, pid) = with_daemon("a fact before the stream");
    let mut child = db
        .learn_jsonl(false)
        .env("KBDB_REQUEST_TIMEOUT_SECS", "2")
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let results = common::stdout_lines(&mut child);
    let mut feed = |text: &str| -> Value {
        writeln!(stdin, "{}", json!({ "content": text })).unwrap();
        stdin.flush().unwrap();
        let line = results
            .recv_timeout(Duration::from_secs(60))
            .expect("a result line");
        serde_json::from_str(&line).unwrap()
    };
    assert!(feed("learned while the daemon answers")["kbid"].is_string());
    // A daemon that stops answering (suspended): the line waits the request timeout, then
    // fails, saying so.
    signal(pid, libc::SIGSTOP);
    let unanswered = feed("sent to a daemon that does not answer");
    signal(pid, libc::SIGCONT);
    let message = unanswered["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("did not answer learn_many within 2s"),
        "{unanswered}"
    );
    // The stream goes on, on a new connection to the daemon answering again.
    assert!(feed("learned once the daemon answers again")["kbid"].is_string());
    drop(stdin);
    assert_eq!(child.wait().unwrap().code(), Some(6), "one line failed");
    assert_eq!(daemon_pid(&db), Some(pid), "the same daemon serves on");
}

/// `n` distinct sections of generated prose (seeded), as `learn --jsonl` lines: words drawn from
/// a small vocabulary, so that they share what a content dictionary learns.
fn prose_lines(n: usize, seed: u64) -> Vec<(String, String)> {
    const WORDS: &[&str] = &[
        "the",
        "index",
        "writer",
        "commits",
        "each",
        "group",
        "of",
        "sections",
        "with",
        "one",
        "journal",
        "append",
        "and",
        "a",
        "durable",
        "checkpoint",
        "every",
        "second",
        "reads",
        "see",
        "only",
        "what",
        "is",
        "on",
        "disk",
        "search",
        "ranks",
        "documents",
        "by",
        "their",
        "terms",
        "near",
        "duplicate",
        "bands",
        "compare",
        "shingles",
        "before",
        "storing",
        "content",
        "under",
        "its",
        "kbid",
        "which",
        "names",
        "the",
        "bytes",
        "themselves",
    ];
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let mut text = format!("## Section {i}\n\n");
            for s in 0..6 + next() % 6 {
                for w in 0..8 + next() % 8 {
                    if w > 0 {
                        text.push(' ');
                    }
                    text.push_str(WORDS[(next() % WORDS.len() as u64) as usize]);
                }
                text.push_str(if s % 3 == 2 { ".\n\n" } else { ". " });
            }
            let text = text.trim_end().to_string();
            let line = json!({"content": text, "docid": format!("prose/{}", i / 40)}).to_string();
            (line, text)
        })
        .collect()
}

/// Learn `lines` through `kbdb learn --jsonl` (through the daemon unless `embedded`); the
/// kbid of each, in order.
fn learn_lines(db: &TestDb, embedded: bool, lines: &[(String, String)]) -> Vec<String> {
    let mut child = db.spawn_learn_jsonl(embedded);
    let mut stdin = child.stdin.take().unwrap();
    let input: String = lines.iter().map(|(l, _)| format!("{l}\n")).collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let out = BufReader::new(child.stdout.take().unwrap());
    let kbids: Vec<String> = out
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(&l.unwrap()).unwrap();
            v["kbid"]
                .as_str()
                .unwrap_or_else(|| panic!("{v}"))
                .to_string()
        })
        .collect();
    writer.join().unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(kbids.len(), lines.len());
    kbids
}

#[test]
fn content_compressed_with_the_trained_dictionary_survives_a_killed_daemon() {
    let db = TestDb::new();
    db.learn(&["a first fact, before any dictionary"]);
    assert_eq!(db.status()["content_dictionary"], Value::Null);
    let pid = daemon_pid(&db).expect("a daemon runs");
    // Enough sections for the database to train its content dictionary.
    let first = prose_lines(4_200, 7);
    let kbids = learn_lines(&db, false, &first);
    // Trained by the daemon's indexer thread, after the writes that reached the threshold.
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        let id = db.status()["content_dictionary"].clone();
        if id.as_u64().is_some() || Instant::now() > deadline {
            break id;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(id.as_u64().is_some(), "a dictionary was trained: {id}");
    // Written after it, through the journal (compressed with it), then the daemon dies.
    let later = prose_lines(4_300, 11).split_off(4_200);
    let later_kbids = learn_lines(&db, false, &later);
    assert!(journal_bytes(&db) > 0, "the last writes are in the journal");
    signal(pid, libc::SIGKILL);
    wait_gone(pid);
    // A new daemon opens the database (replaying the journal) and reads every content back
    // exactly, from both sides of the training.
    let retrieve = |kbid: &str| -> String {
        let v = db.json(&["retrieve", "--kbid", kbid]);
        v[0]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"))
            .to_string()
    };
    for i in [0, 1, 2_000, 4_199] {
        assert_eq!(
            retrieve(&kbids[i]),
            first[i].1,
            "section {i} learned before"
        );
    }
    for i in [0, 50, 99] {
        assert_eq!(
            retrieve(&later_kbids[i]),
            later[i].1,
            "section {i} learned after"
        );
    }
    let status = db.status();
    assert_eq!(
        status["content_dictionary"], id,
        "the same dictionary, from the store"
    );
    assert_eq!(status["sections"], 1 + 4_200 + 100);
    let check = db.json(&["check"]);
    assert_eq!(check["ok"], true, "{check}");
    // The same content learned again is known, not stored twice.
    let again = learn_lines(&db, false, &later[..10]);
    assert_eq!(again, later_kbids[..10]);
    assert_eq!(db.status()["sections"], 1 + 4_200 + 100);
    // And a process of its own reads it too.
    db.stop_daemon();
    let v = db.json(&["--embedded", "retrieve", "--kbid", &later_kbids[7]]);
    assert_eq!(v[0]["content"].as_str(), Some(later[7].1.as_str()));
}

#[test]
fn a_damaged_content_dictionary_leaves_the_database_open_and_names_the_sections_it_holds() {
    let db = TestDb::new();
    let lines = prose_lines(4_200, 3);
    let kbids = learn_lines(&db, true, &lines);
    assert!(db.json(&["--embedded", "status"])["content_dictionary"].is_u64());
    // Learned once it has the dictionary: compressed with it.
    let later = prose_lines(4_300, 3).split_off(4_200);
    let later_kbids = learn_lines(&db, true, &later);
    // One byte of the stored dictionary changed.
    {
        let redb_file = redb::Database::create(db.path().join("kbdb.redb")).unwrap();
        let txn = redb_file.begin_write().unwrap();
        {
            let meta_def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
            let mut meta = txn.open_table(meta_def).unwrap();
            let mut bytes = meta
                .get("content_dictionary")
                .unwrap()
                .unwrap()
                .value()
                .to_vec();
            let last = bytes.len() - 1;
            bytes[last] ^= 0x55;
            meta.insert("content_dictionary", bytes.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    // Each command is a process of its own, which knows no dictionary but the stored one.
    assert_eq!(
        db.json(&["--embedded", "status"])["content_dictionary"],
        Value::Null
    );
    let retrieve = |kbid: &str| {
        db.cmd()
            .args(["--embedded", "--format", "json", "retrieve", "--kbid", kbid])
            .output()
            .unwrap()
    };
    // Stored before the dictionary: reads as ever.
    let out = retrieve(&kbids[0]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["content"].as_str(), Some(lines[0].1.as_str()));
    // Compressed with it: damage, named.
    let damaged = &later_kbids[10];
    let out = retrieve(damaged);
    assert!(!out.status.success());
    let error =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(error.contains(damaged.as_str()), "{error}");
    let (_, check) = db.json_exit(&["--embedded", "check"]);
    assert_eq!(check["ok"], false);
    let named = check["errors"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["entity"] == damaged.as_str());
    assert!(named, "{check}");
}
