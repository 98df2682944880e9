//! Lexical search forgives what people type: accents and diacritics (`cafe` finds `café`),
//! text in scripts without spaces (a Chinese or Japanese word inside a sentence), and an index
//! built by an older kbdb gets the new analysis when the database is opened.

mod common;

use common::TestDb;
use serde_json::Value;

fn kbids(v: &Value) -> Vec<String> {
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kbid"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn accents_fold_both_ways() {
    let db = TestDb::new();
    let fr = db.learn(&["Le café est fermé le dimanche."])["kbid"].clone();
    let plain = db.learn(&["The resume of the naive approach."])["kbid"].clone();
    for q in ["cafe", "café", "CAFÉ", "ferme", "fermé"] {
        assert_eq!(kbids(&db.json(&["search", q])), vec![fr.clone()], "{q}");
    }
    for q in ["résumé", "naïve"] {
        assert_eq!(kbids(&db.json(&["search", q])), vec![plain.clone()], "{q}");
    }
}

#[test]
fn chinese_and_japanese_words_are_found_inside_sentences() {
    let db = TestDb::new();
    let zh = db.learn(&["我们选择了数据库因为它支持事务。"])["kbid"].clone();
    let ja = db.learn(&["東京のデータベースは速いです。"])["kbid"].clone();
    assert_eq!(kbids(&db.json(&["search", "数据库"])), vec![zh.clone()]);
    assert_eq!(kbids(&db.json(&["search", "事务"])), vec![zh]);
    assert_eq!(
        kbids(&db.json(&["search", "データベース"])),
        vec![ja.clone()]
    );
    assert_eq!(kbids(&db.json(&["search", "東京"])), vec![ja]);
    let none = db.json(&["search", "图书馆"]);
    assert!(kbids(&none).is_empty(), "{none}");
}

#[test]
fn a_one_character_word_is_found_inside_longer_runs() {
    let db = TestDb::new();
    let ja = db.learn(&["東京の桜は三月の終わりに咲きます。"])["kbid"].clone();
    let zh = db.learn(&["夜桜很美。"])["kbid"].clone();
    let alone = db.learn(&["桜 (sakura): the cherry tree."])["kbid"].clone();
    db.learn(&["東京の天気は晴れです。"]);
    let mut found = kbids(&db.json(&["search", "桜"]));
    found.sort();
    let mut want: Vec<String> = [&ja, &zh, &alone]
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    want.sort();
    assert_eq!(found, want);
    // With other words, each must still match.
    assert_eq!(
        kbids(&db.json(&["search", "桜 東京"])),
        vec![ja.as_str().unwrap()]
    );
    let none = db.json(&["search", "梅"]);
    assert!(kbids(&none).is_empty(), "{none}");
}

#[test]
fn an_index_built_with_the_older_analysis_is_rebuilt_at_open() {
    // An index that claims to hold every change, written by a kbdb of the older analysis: here
    // an empty index whose commit payload has the older form.
    let db = TestDb::new();
    let fact = db.learn(&["Le café est fermé."])["kbid"].clone();
    let seq = db.status()["last_change_seq"].as_u64().unwrap();
    let empty = TestDb::new();
    empty.status();
    db.stop_daemon();
    empty.stop_daemon();
    let index = db.dir.join("index/lexical");
    std::fs::remove_dir_all(&index).unwrap();
    std::fs::create_dir_all(&index).unwrap();
    for entry in std::fs::read_dir(empty.dir.join("index/lexical")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), index.join(entry.file_name())).unwrap();
    }
    let meta_path = index.join("meta.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    meta["payload"] = Value::from(format!("kbdb-lexical-v1 seq={seq}"));
    std::fs::write(&meta_path, meta.to_string()).unwrap();

    assert_eq!(kbids(&db.json(&["search", "cafe"])), vec![fact]);
    let out = db.cmd().args(["check"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_word_that_matches_nothing_is_searched_as_the_nearest_indexed_word_and_said_so() {
    let db = TestDb::new();
    let pg = db.learn(&["We chose Postgres because of JSONB."])["kbid"].clone();
    let k8s = db.learn(&["Kubernetes runs the staging cluster."])["kbid"].clone();
    let mig = db.learn(&["The schema migration finished overnight."])["kbid"].clone();
    for (typo, word, kbid) in [
        ("postgress", "postgres", &pg),
        ("kubernetse", "kubernetes", &k8s),
        ("migraton", "migration", &mig),
        ("overnihgt", "overnight", &mig),
    ] {
        let r = db.json(&["search", typo]);
        assert_eq!(kbids(&r), vec![kbid.clone()], "{typo}: {r}");
        assert_eq!(r["corrected"][typo], word, "{r}");
        assert!(
            r["warnings"][0]
                .as_str()
                .unwrap()
                .starts_with("fuzzy_match:"),
            "{r}"
        );
    }
    // Only the word that matched nothing is corrected; the others are searched as typed.
    let r = db.json(&["search", "staging kubernetse"]);
    assert_eq!(kbids(&r), vec![k8s.clone()], "{r}");
    assert_eq!(r["corrected"].as_object().unwrap().len(), 1, "{r}");
}

#[test]
fn a_query_whose_words_match_is_never_corrected() {
    let db = TestDb::new();
    let a = db.learn(&["The postgrex driver is for Elixir."])["kbid"].clone();
    let b = db.learn(&["We chose Postgres because of JSONB."])["kbid"].clone();
    let r = db.json(&["search", "postgrex"]);
    assert_eq!(kbids(&r), vec![a], "{r}");
    assert!(r.get("corrected").is_none(), "{r}");
    assert!(r.get("warnings").is_none(), "{r}");
    // A synonym match is a match (pg ↔ postgres).
    let r = db.json(&["search", "pg"]);
    assert_eq!(kbids(&r), vec![b], "{r}");
    assert!(r.get("corrected").is_none(), "{r}");
    // A word the index does not hold that matches by a synonym is a match too (it is not
    // corrected to a neighbouring word).
    let k8s = db.learn(&["The k8s cluster runs staging."])["kbid"].clone();
    db.learn(&["Kubernates is a typo someone stored."]);
    let r = db.json(&["search", "kubernetes"]);
    assert_eq!(kbids(&r), vec![k8s], "{r}");
    assert!(r.get("corrected").is_none(), "{r}");
    // Short words and words far from everything stay unmatched.
    for q in ["pgx", "zzzzzzzz"] {
        let r = db.json(&["search", q]);
        assert!(kbids(&r).is_empty(), "{q}: {r}");
        assert!(r.get("corrected").is_none(), "{q}: {r}");
    }
}
