//! Vector and hybrid search through the real binary and the `api` provider, against a real
//! OpenAI-compatible server on loopback (tests/common/embed_server.rs): fusion, filters,
//! paging, the three fallbacks, stale detection, rebuild, and pending embeddings that survive
//! a SIGKILL of the daemon.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::TestDb;
use common::embed_server::EmbedServer;
use serde_json::Value;

fn with_server(model: &str) -> (TestDb, EmbedServer) {
    let db = TestDb::new();
    let server = EmbedServer::start();
    std::fs::write(db.dir.join("worker.toml"), server.worker_toml(model)).unwrap();
    (db, server)
}

fn kbids(r: &Value) -> Vec<String> {
    r["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kbid"].as_str().unwrap().to_string())
        .collect()
}

/// Wait until the daemon has embedded everything (status shows nothing pending).
fn wait_embedded(db: &TestDb) -> Value {
    let start = Instant::now();
    loop {
        let s = db.status();
        if s["vectors"]["pending_changes"] == 0 {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "embeddings still pending: {s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn hybrid_finds_by_meaning_what_lexical_misses() {
    let (db, _server) = with_server("concepts-v1");
    let fact = db.learn(&["We chose Postgres because of JSONB."]);
    db.learn(&["The kitten sleeps on the sofa all afternoon."]);
    db.learn(&["Releases go out every Tuesday after review."]);

    let lexical = db.json(&["search", "database rationale"]);
    assert_eq!(lexical["search_mode"], "lexical");
    assert_eq!(lexical["retrieval_method"], "lexical");
    assert!(
        !kbids(&lexical).contains(&fact["kbid"].as_str().unwrap().to_string()),
        "{lexical}"
    );

    let hybrid = db.json(&["search", "--mode", "hybrid", "database rationale"]);
    assert_eq!(hybrid["search_mode"], "hybrid");
    assert_eq!(hybrid["retrieval_method"], "hybrid");
    assert_eq!(
        kbids(&hybrid)[0],
        fact["kbid"].as_str().unwrap(),
        "{hybrid}"
    );
    // A vector-only hit has no matched words.
    assert_eq!(hybrid["items"][0]["matched_terms"], serde_json::json!([]));

    let vector = db.json(&["search", "--search-mode", "vector", "database rationale"]);
    assert_eq!(vector["retrieval_method"], "vector");
    assert_eq!(kbids(&vector)[0], fact["kbid"].as_str().unwrap());

    // A section found both ways ranks above one found one way.
    let both = db.learn(&["Postgres replication lag dashboard."]);
    let r = db.json(&["search", "--mode", "hybrid", "postgres"]);
    let ids = kbids(&r);
    assert!(ids.contains(&both["kbid"].as_str().unwrap().to_string()));
    assert!(ids.contains(&fact["kbid"].as_str().unwrap().to_string()));

    let s = db.status();
    assert_eq!(s["vectors"]["provider"], "api");
    assert_eq!(s["vectors"]["stored_model"], "concepts-v1");
    assert_eq!(s["vectors"]["count"], 4);
    assert_eq!(s["vectors"]["stale"], false);
}

#[test]
fn filters_and_paging_apply_to_the_vector_path() {
    let (db, _server) = with_server("concepts-v1");
    let mut tagged = Vec::new();
    for i in 0..12 {
        let content = format!("Database decision number {i}: we chose Postgres for reason {i}.");
        let r = if i % 3 == 0 {
            db.learn(&[&content, "--tag", "adr"])
        } else {
            db.learn(&[&content])
        };
        if i % 3 == 0 {
            tagged.push(r["kbid"].as_str().unwrap().to_string());
        }
    }
    db.learn(&[
        "fn main() { println!(\"database\"); }",
        "--type",
        "text/x-rust",
    ]);

    let r = db.json(&[
        "search",
        "--mode",
        "vector",
        "why this storage",
        "--tag",
        "adr",
    ]);
    let mut got = kbids(&r);
    got.sort();
    tagged.sort();
    assert_eq!(got, tagged, "{r}");
    let r = db.json(&[
        "search",
        "--mode",
        "vector",
        "storage",
        "--type",
        "text/x-rust",
    ]);
    assert_eq!(r["items"].as_array().unwrap().len(), 1, "{r}");

    // Pages of a hybrid search neither repeat nor skip.
    let all = kbids(&db.json(&["search", "--mode", "hybrid", "database", "--limit", "13"]));
    let mut paged = Vec::new();
    for offset in [0, 5, 10] {
        let p = db.json(&[
            "search",
            "--mode",
            "hybrid",
            "database",
            "--limit",
            "5",
            "--offset",
            &offset.to_string(),
        ]);
        paged.extend(kbids(&p));
    }
    assert_eq!(paged, all);
    let deep = db
        .cmd()
        .args([
            "search", "--mode", "hybrid", "x", "--offset", "199", "--limit", "5",
        ])
        .output()
        .unwrap();
    assert!(!deep.status.success());
    assert!(String::from_utf8_lossy(&deep.stderr).contains("offset + limit must not exceed 200"));
}

#[test]
fn retrieval_path_set_twice_must_agree() {
    let (db, _server) = with_server("concepts-v1");
    db.learn(&["anything at all"]);
    let out = db
        .cmd()
        .args(["search", "x", "--mode", "hybrid", "--search-mode", "vector"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("search_mode: is 'vector' but mode is 'hybrid'")
    );
    let r = db.json(&["search", "x", "--mode", "hybrid", "--search-mode", "hybrid"]);
    assert_eq!(r["retrieval_method"], "hybrid");
}

#[test]
fn without_a_provider_vector_search_is_an_error() {
    let db = TestDb::new();
    db.learn(&["We chose Postgres because of JSONB."]);
    let out = db
        .cmd()
        .args(["search", "--mode", "hybrid", "database", "--format", "json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("EMBEDDING_PROVIDER_NOT_CONFIGURED"), "{text}");
    assert!(
        text.contains("Vector search requires a configured embedding provider"),
        "{text}"
    );
    // Lexical still answers, and says so.
    let r = db.json(&["search", "postgres"]);
    assert_eq!(r["search_mode"], "lexical");
    assert_eq!(r["retrieval_method"], "lexical");
    assert_eq!(db.status()["vectors"]["provider"], "none");
}

#[test]
fn another_model_makes_the_index_stale_until_rebuild() {
    let (db, server) = with_server("concepts-v1");
    let fact = db.learn(&["We chose Postgres because of JSONB."]);
    assert_eq!(
        kbids(&db.json(&["search", "--mode", "hybrid", "database rationale"]))[0],
        fact["kbid"].as_str().unwrap()
    );
    // The operator switches models: worker.toml changes, the daemon is replaced.
    std::fs::write(
        db.dir.join("worker.toml"),
        server.worker_toml("concepts-v2"),
    )
    .unwrap();
    let r = db.json(&["search", "--mode", "hybrid", "database rationale"]);
    assert_eq!(r["search_mode"], "hybrid");
    assert_eq!(r["retrieval_method"], "lexical");
    assert_eq!(r["vector_index_stale"], true);
    assert_eq!(db.status()["vectors"]["stale"], true);
    // New sections are not embedded with the new model into the old index.
    db.learn(&["The kitten sleeps."]);
    assert_eq!(db.status()["vectors"]["stored_model"], "concepts-v1");

    let rebuilt = db.json(&["rebuild"]);
    assert_eq!(rebuilt["vectors_embedded"], 2, "{rebuilt}");
    let s = db.status();
    assert_eq!(s["vectors"]["stored_model"], "concepts-v2");
    assert_eq!(s["vectors"]["stale"], false);
    assert!(s["vectors"]["built_at"].is_string());
    let r = db.json(&["search", "--mode", "hybrid", "database rationale"]);
    assert_eq!(r["retrieval_method"], "hybrid");
    assert!(r.get("vector_index_stale").is_none());
    assert_eq!(kbids(&r)[0], fact["kbid"].as_str().unwrap());
}

#[test]
fn a_failing_provider_flags_the_learn_and_keeps_the_section() {
    let (db, server) = with_server("concepts-v1");
    db.learn(&["first section, embedded fine"]);
    server.fail.store(true, Ordering::SeqCst);
    db.stop_daemon();
    // Embedded: the learning call embeds itself, so it knows.
    let out = db
        .cmd()
        .args([
            "--embedded",
            "learn",
            "We chose Postgres because of JSONB.",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["vector_embedding_failed"], true, "{r}");
    // Lexically it is there; its embedding waits.
    assert_eq!(
        kbids(&db.json(&["--embedded", "search", "postgres"])).len(),
        1
    );
    let s = db.json(&["--embedded", "status"]);
    assert!(s["vectors"]["pending_changes"].as_u64().unwrap() > 0, "{s}");

    // A vector search while the provider is down answers lexically and says why.
    let r = db.json(&["--embedded", "search", "--mode", "hybrid", "postgres"]);
    assert_eq!(r["retrieval_method"], "lexical", "{r}");
    assert_eq!(r["search_mode"], "hybrid", "{r}");
    assert_eq!(kbids(&r).len(), 1, "{r}");
    let warning = r["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with("embedding_unavailable:") && warning.contains("cannot embed the query"),
        "{r}"
    );

    // The provider recovers: the next vector search embeds what waited and finds it.
    server.fail.store(false, Ordering::SeqCst);
    let r = db.json(&["search", "--mode", "vector", "database rationale"]);
    assert!(
        r["items"][0]["snippet"]
            .as_str()
            .unwrap()
            .contains("Postgres"),
        "{r}"
    );
    let s = wait_embedded(&db);
    assert_eq!(s["vectors"]["count"], 2);
    let ok = db.learn(&["another section after recovery"]);
    assert!(ok.get("vector_embedding_failed").is_none(), "{ok}");
}

#[test]
fn pending_embeddings_survive_a_daemon_kill() {
    let (db, server) = with_server("concepts-v1");
    db.learn(&["warm-up section"]);
    wait_embedded(&db);
    server.fail.store(true, Ordering::SeqCst);
    let mut learned = Vec::new();
    for i in 0..20 {
        let r = db.learn(&[&format!("Postgres decision {i}: because of JSONB")]);
        learned.push(r["kbid"].as_str().unwrap().to_string());
    }
    let s = db.status();
    assert!(
        s["vectors"]["pending_changes"].as_u64().unwrap() >= 20,
        "{s}"
    );
    // Kill the daemon the hard way.
    let info = db.json(&["daemon", "status"]);
    let pid = info["daemon"]["pid"].as_u64().expect("daemon pid") as u32;
    assert!(common::daemon::sigkill(pid));
    // A killed process ends once its threads' disk writes are done: seconds on a loaded machine.
    assert!(
        common::daemon::wait_gone(pid, Duration::from_secs(60)),
        "the killed daemon is still running"
    );
    server.fail.store(false, Ordering::SeqCst);
    // The next client starts a new daemon, which resumes the pending embeddings by itself.
    let s = wait_embedded(&db);
    assert_eq!(s["vectors"]["count"], 21, "{s}");
    let r = db.json(&[
        "search",
        "--mode",
        "vector",
        "database rationale",
        "--limit",
        "25",
    ]);
    let found = kbids(&r);
    for k in &learned {
        assert!(found.contains(k), "{k} missing from {r}");
    }
    assert_eq!(db.json(&["check"])["ok"], true);
}

#[test]
fn exported_vectors_are_reused_by_an_import_of_the_same_model() {
    let (db, server) = with_server("concepts-v1");
    let fact = db.learn(&["We chose Postgres because of JSONB."]);
    db.learn(&["The kitten sleeps on the sofa."]);
    wait_embedded(&db);
    let out = db.tmp.path().join("export");
    db.json(&["export", out.to_str().unwrap(), "--with-indexes"]);
    let meta = std::fs::read_to_string(out.join("indexes/vectors-meta.toml")).unwrap();
    assert!(meta.contains("model_name  = \"concepts-v1\""), "{meta}");
    assert!(meta.contains("section_count = 2"), "{meta}");
    let idx = std::fs::read(out.join("indexes/vectors.idx")).unwrap();
    assert_eq!(idx.len(), 11 + 2 * (16 + 32 * 4));

    // Same model: the vectors are taken over, the provider is not asked again.
    let other = TestDb::new();
    std::fs::write(
        other.dir.join("worker.toml"),
        server.worker_toml("concepts-v1"),
    )
    .unwrap();
    let before = server.requests.load(Ordering::SeqCst);
    let r = other.json(&["import", out.to_str().unwrap()]);
    assert_eq!(r["vectors_found"], 2, "{r}");
    assert_eq!(r["vectors_reused"], 2, "{r}");
    let s = wait_embedded(&other);
    assert_eq!(s["vectors"]["count"], 2);
    assert_eq!(
        server.requests.load(Ordering::SeqCst),
        before,
        "sections were embedded again"
    );
    let hit = other.json(&["search", "--mode", "vector", "database rationale"]);
    assert_eq!(kbids(&hit)[0], fact["kbid"].as_str().unwrap());

    // Another model: nothing reused, everything embedded anew.
    let third = TestDb::new();
    std::fs::write(
        third.dir.join("worker.toml"),
        server.worker_toml("concepts-v9"),
    )
    .unwrap();
    let r = third.json(&["import", out.to_str().unwrap()]);
    assert_eq!(r["vectors_reused"], 0, "{r}");
    let s = wait_embedded(&third);
    assert_eq!(s["vectors"]["count"], 2, "{s}");
    assert_eq!(s["vectors"]["stored_model"], "concepts-v9");
}

#[test]
fn configuring_a_provider_embeds_the_sections_already_stored() {
    let db = TestDb::new();
    let fact = db.learn(&["We chose Postgres because of JSONB."]);
    db.learn(&["The kitten sleeps on the sofa."]);
    let server = EmbedServer::start();
    std::fs::write(
        db.dir.join("worker.toml"),
        server.worker_toml("concepts-v1"),
    )
    .unwrap();
    let s = wait_embedded(&db);
    assert_eq!(s["vectors"]["count"], 2, "{s}");
    assert_eq!(s["vectors"]["stale"], false);
    let r = db.json(&["search", "--mode", "hybrid", "database rationale"]);
    assert_eq!(kbids(&r)[0], fact["kbid"].as_str().unwrap());
}

#[test]
fn a_hybrid_search_needs_no_extra_thread() {
    // The vector scan runs beside the lexical query on a thread of its own; a daemon that cannot
    // start one (a process limit) runs it on the request's thread instead of failing.
    let (db, _server) = with_server("concepts-v1");
    let fact = db.learn(&["We chose Postgres because of JSONB."]);
    db.learn(&["The kitten sleeps on the sofa all afternoon."]);
    wait_embedded(&db);
    let query = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "search",
        "params": {"query": "database rationale", "mode": "hybrid"}});
    let mut conn = common::daemon::Raw::connect(&db);
    let before = conn.call_json(query.clone());
    assert_eq!(before["result"]["retrieval_method"], "hybrid", "{before}");
    let pid = db.json(&["daemon", "status"])["daemon"]["pid"]
        .as_u64()
        .unwrap() as u32;
    let Some(limit) = common::daemon::PidsLimit::freeze_threads_of(pid) else {
        eprintln!("skipped: this machine lets no test limit a process's threads (cgroup v1 pids)");
        return;
    };
    for _ in 0..3 {
        let v = conn.call_json(query.clone());
        assert_eq!(v["result"]["retrieval_method"], "hybrid", "{v}");
        assert_eq!(
            kbids(&v["result"])[0],
            fact["kbid"].as_str().unwrap(),
            "{v}"
        );
        assert_eq!(v["result"]["items"], before["result"]["items"]);
    }
    drop(limit);
}

/// An `[embedding]` section for an API nobody answers (a port that was just closed).
fn unreachable_api_toml() -> String {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    format!(
        "[embedding]\nprovider = \"api\"\napi_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\ndimensions = 8\napi_timeout_secs = 2\napi_max_retries = 1\n"
    )
}

#[test]
fn an_unreachable_embedding_api_degrades_search_to_lexical_and_flags_the_first_learn() {
    let db = TestDb::new();
    std::fs::write(db.dir.join("worker.toml"), unreachable_api_toml()).unwrap();
    // The first learn through a fresh daemon already knows the provider is down.
    let r = db.learn(&["We chose Postgres because of JSONB."]);
    assert_eq!(r["vector_embedding_failed"], true, "{r}");
    for mode in ["hybrid", "vector"] {
        let out = db
            .cmd()
            .args(["search", "--mode", mode, "postgres", "--format", "json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{mode}: {out:?}");
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["retrieval_method"], "lexical", "{r}");
        assert_eq!(kbids(&r).len(), 1, "{r}");
        assert!(
            r["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w.as_str().unwrap().starts_with("embedding_unavailable:")),
            "{r}"
        );
    }
    // Through MCP as well: a result, not an error.
    let mut mcp = common::mcp::McpChild::start(&db);
    let r = mcp.tool_ok(
        "search",
        serde_json::json!({"query": "postgres", "mode": "hybrid"}),
    );
    assert_eq!(r["retrieval_method"], "lexical", "{r}");
    mcp.close();
}

#[test]
fn every_item_carries_its_score_and_hybrid_items_their_ranks_in_each_list() {
    let (db, _server) = with_server("concepts-v1");
    db.learn(&["We chose Postgres because of JSONB."]);
    db.learn(&["Postgres replication lag dashboard."]);
    db.learn(&["The kitten sleeps on the sofa all afternoon."]);
    let scores = |r: &Value| -> Vec<f64> {
        r["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["score"].as_f64().unwrap())
            .collect()
    };
    let lexical = db.json(&["search", "postgres"]);
    let s = scores(&lexical);
    assert_eq!(s.len(), 2, "{lexical}");
    assert!(s.iter().all(|x| *x > 0.0) && s[0] >= s[1], "{lexical}");
    assert!(
        lexical["items"][0].get("lexical_rank").is_none(),
        "{lexical}"
    );

    let vector = db.json(&["search", "--mode", "vector", "database rationale"]);
    let s = scores(&vector);
    assert!(s.windows(2).all(|w| w[0] >= w[1]), "{vector}");
    assert!(
        s[0] > 0.0 && s[0] <= 1.0001,
        "a cosine similarity: {vector}"
    );

    let hybrid = db.json(&["search", "--mode", "hybrid", "postgres"]);
    let s = scores(&hybrid);
    assert!(s.windows(2).all(|w| w[0] >= w[1]), "{hybrid}");
    for item in hybrid["items"].as_array().unwrap() {
        // Both present on every hybrid item: null when that list did not return it.
        let (Some(l), Some(v)) = (item.get("lexical_rank"), item.get("vector_rank")) else {
            panic!("a hybrid item without its ranks: {item}");
        };
        assert!(l.is_u64() || l.is_null(), "{item}");
        assert!(v.is_u64() || v.is_null(), "{item}");
        assert!(l.is_u64() || v.is_u64(), "{item}");
    }
    // The kitten is found by neither list's words: if listed, only by its vector rank.
    let kitten = hybrid["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["snippet"].as_str().unwrap().contains("kitten"));
    if let Some(k) = kitten {
        assert!(k["lexical_rank"].is_null(), "{k}");
    }
    let first = &hybrid["items"][0];
    assert!(
        first["lexical_rank"].is_u64() && first["vector_rank"].is_u64(),
        "{hybrid}"
    );
}

#[test]
fn a_question_in_other_words_ranks_the_vector_match_above_sections_sharing_a_word() {
    let (db, _server) = with_server("concepts-v1");
    // The answer shares no word with the question; each distractor shares one, and is near in
    // meaning too, so it is in both lists.
    let answer = db.learn(&["We chose Postgres because of JSONB."]);
    db.learn(&["The database of cat pictures."]);
    db.learn(&["The rationale for the kitten names."]);
    let vector = db.json(&["search", "--mode", "vector", "database rationale"]);
    assert_eq!(
        kbids(&vector)[0],
        answer["kbid"].as_str().unwrap(),
        "{vector}"
    );
    let lexical = db.json(&["search", "database rationale"]);
    assert_eq!(lexical["relaxed"], true, "{lexical}");
    let hybrid = db.json(&["search", "--mode", "hybrid", "database rationale"]);
    assert_eq!(
        kbids(&hybrid)[0],
        answer["kbid"].as_str().unwrap(),
        "hybrid must not lose to its own vector leg: {hybrid}"
    );
}

#[test]
fn a_short_relaxed_list_holding_a_rare_word_counts_in_the_fusion() {
    let (db, _server) = with_server("concepts-v1");
    // The query's rare word is in one section of twelve; the vector leg prefers the kittens
    // (the query's other word, `pet`, is their concept) and ranks the answer last.
    let answer = db.learn(&["重置密码: open the account settings page and follow the link."]);
    for i in 0..11 {
        db.learn(&[&format!("The kitten number {i} sleeps on the sofa.")]);
    }
    wait_embedded(&db);
    let lexical = db.json(&["search", "pet 密码"]);
    assert_eq!(lexical["relaxed"], true, "{lexical}");
    assert_eq!(lexical["total"], 1, "{lexical}");
    let vector = db.json(&["search", "--mode", "vector", "pet 密码"]);
    assert_ne!(
        kbids(&vector)[0],
        answer["kbid"].as_str().unwrap(),
        "{vector}"
    );
    let hybrid = db.json(&["search", "--mode", "hybrid", "pet 密码"]);
    assert_eq!(
        kbids(&hybrid)[0],
        answer["kbid"].as_str().unwrap(),
        "a short relaxed list is specific evidence: {hybrid}"
    );
    assert_eq!(hybrid["items"][0]["lexical_rank"], 1, "{hybrid}");
}

#[test]
fn sections_below_the_relevance_floor_are_not_listed_and_total_counts_what_is() {
    let (db, _server) = with_server("concepts-v1");
    let answer = db.learn(&["We chose Postgres because of JSONB."]);
    // Twelve sections sharing one word with the second query and nothing in meaning (their
    // similarity to it is 0.07, to the first query 0).
    for i in 0..12 {
        db.learn(&[&format!(
            "Kitchen rota {i}: wipe the counters, empty the bins, water the plants."
        )]);
    }
    wait_embedded(&db);
    let answer = answer["kbid"].as_str().unwrap();
    let vector = db.json(&[
        "search",
        "--mode",
        "vector",
        "--limit",
        "50",
        "database rationale",
    ]);
    assert_eq!(kbids(&vector), vec![answer], "{vector}");
    assert_eq!(vector["total"], 1, "{vector}");
    // The lexical side relaxes to the twelve rota sections (one shared word: no vote); below
    // the floor in meaning, they are not listed, and `total` does not count them.
    let hybrid = db.json(&[
        "search",
        "--mode",
        "hybrid",
        "--limit",
        "50",
        "rationale kitchen",
    ]);
    assert_eq!(kbids(&hybrid), vec![answer], "{hybrid}");
    assert_eq!(hybrid["total"], 1, "{hybrid}");
    assert_eq!(hybrid["has_more"], false, "{hybrid}");
    assert!(
        hybrid["items"][0]["score"].as_f64().unwrap() > 0.0,
        "{hybrid}"
    );
    // Nothing close enough: empty, with a hint that says why.
    let none = db.json(&["search", "--mode", "vector", "kitten sofa"]);
    assert_eq!(none["total"], 0, "{none}");
    assert!(
        none["hint"].as_str().unwrap().contains("relevance floor"),
        "{none}"
    );
    // min_score 0 lists them all again, through the CLI and MCP; out of range is an error.
    let all = db.json(&[
        "search",
        "--mode",
        "vector",
        "--limit",
        "50",
        "--min-score",
        "0",
        "database rationale",
    ]);
    assert_eq!(all["total"], 13, "{all}");
    let mut mcp = common::mcp::McpChild::start(&db);
    let r = mcp.tool_ok(
        "search",
        serde_json::json!({"query": "rationale kitchen", "mode": "hybrid", "limit": 50, "min_score": 0}),
    );
    assert_eq!(r["total"], 13, "{r}");
    mcp.close();
    let out = db
        .cmd()
        .args(["search", "--mode", "vector", "--min-score", "1.5", "x"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("min_score"),
        "{out:?}"
    );
}

#[test]
fn a_repeated_query_through_the_daemon_is_not_embedded_again() {
    let (db, server) = with_server("concepts-v1");
    db.learn(&["We chose Postgres because of JSONB."]);
    wait_embedded(&db);
    let first = db.json(&["search", "--mode", "hybrid", "database rationale"]);
    let after_first = server.requests.load(Ordering::SeqCst);
    for mode in ["hybrid", "vector", "hybrid"] {
        let again = db.json(&["search", "--mode", mode, "database rationale"]);
        assert_eq!(kbids(&again), kbids(&first), "{again}");
    }
    assert_eq!(
        server.requests.load(Ordering::SeqCst),
        after_first,
        "the query was embedded again"
    );
    // Another query is embedded.
    db.json(&["search", "--mode", "hybrid", "kitten"]);
    assert_eq!(server.requests.load(Ordering::SeqCst), after_first + 1);
}
