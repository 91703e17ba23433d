//! Many clients at once: no lost update, no torn file, every conflict reported.

use std::sync::Arc;

use serde_json::{json, Value};

use wardfs::client::{Client, ClientError};
use wardfs::core::ErrorCode;

use crate::support::Daemon;

const CLIENTS: usize = 16;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn sixteen_clients_editing_one_file_lose_no_update() {
    let d = Daemon::start("");
    const ROUNDS: usize = 25;
    let seed: String = (0..CLIENTS).map(|i| format!("slot-{i}=0\n")).collect();
    std::fs::write(d.zone_dir("workspace").join("shared.txt"), &seed).unwrap();
    let client = Arc::new(d.client());
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let client = client.clone();
            std::thread::spawn(move || {
                runtime().block_on(async {
                    for k in 0..ROUNDS {
                        let body = json!({
                            "path": "/workspace/shared.txt",
                            "old": format!("slot-{i}={k}\n"),
                            "new": format!("slot-{i}={}\n", k + 1),
                        });
                        let r: Result<Value, _> = client.post("/v1/fs/edit", &body).await;
                        r.unwrap_or_else(|e| panic!("client {i} round {k}: {e}"));
                    }
                })
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let want: String = (0..CLIENTS)
        .map(|i| format!("slot-{i}={ROUNDS}\n"))
        .collect();
    assert_eq!(
        std::fs::read_to_string(d.zone_dir("workspace").join("shared.txt")).unwrap(),
        want
    );
}

#[test]
fn racing_edits_of_the_same_text_have_exactly_one_winner() {
    let d = Daemon::start("");
    std::fs::write(d.zone_dir("workspace").join("race.txt"), "owner=nobody\n").unwrap();
    let client = Arc::new(d.client());
    let barrier = Arc::new(std::sync::Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (client, barrier) = (client.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                runtime().block_on(async {
                    let body = json!({"path": "/workspace/race.txt", "old": "owner=nobody", "new": format!("owner={i}")});
                    client.post::<_, Value>("/v1/fs/edit", &body).await.map(|_| i)
                })
            })
        })
        .collect();
    let results: Vec<Result<usize, ClientError>> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    let winners: Vec<usize> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(
                matches!(
                    e.code(),
                    Some(ErrorCode::NoMatch) | Some(ErrorCode::Conflict)
                ),
                "{e}"
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(d.zone_dir("workspace").join("race.txt")).unwrap(),
        format!("owner={}\n", winners[0])
    );
}

#[test]
fn readers_never_see_a_torn_file_while_writers_replace_it() {
    let d = Daemon::start("");
    const SIZE: usize = 64 * 1024;
    std::fs::write(d.zone_dir("workspace").join("torn.txt"), "a".repeat(SIZE)).unwrap();
    let client = Arc::new(d.client());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..CLIENTS / 2)
        .map(|i| {
            let client = client.clone();
            std::thread::spawn(move || {
                runtime().block_on(async {
                    for k in 0..30 {
                        let ch = (b'a' + ((i * 7 + k) % 26) as u8) as char;
                        let body = json!({"path": "/workspace/torn.txt", "content": ch.to_string().repeat(SIZE)});
                        client.post::<_, Value>("/v1/fs/write", &body).await.unwrap();
                    }
                })
            })
        })
        .collect();
    let readers: Vec<_> = (0..CLIENTS / 2)
        .map(|_| {
            let (client, stop) = (client.clone(), stop.clone());
            std::thread::spawn(move || {
                runtime().block_on(async {
                    let mut reads = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads < 10 {
                        let v: Value = client
                            .post("/v1/fs/read", &json!({"path": "/workspace/torn.txt"}))
                            .await
                            .unwrap();
                        let s = v["content"].as_str().unwrap();
                        assert_eq!(s.len(), SIZE, "short read");
                        let first = s.as_bytes()[0];
                        assert!(s.bytes().all(|b| b == first), "torn file seen");
                        reads += 1;
                    }
                    reads
                })
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(reads >= 80);
    // No temp file survives the storm.
    let names: Vec<_> = std::fs::read_dir(d.zone_dir("workspace"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["torn.txt"]);
}

#[test]
fn clients_writing_different_files_read_back_their_own_data() {
    let d = Daemon::start("");
    let client: Arc<Client> = Arc::new(d.client());
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let client = client.clone();
            std::thread::spawn(move || {
                runtime().block_on(async {
                    for k in 0..20 {
                        let path = format!("/workspace/c{i}/f{}.txt", k % 4);
                        let content = format!("client {i} round {k}\n").repeat(k + 1);
                        client
                            .post::<_, Value>(
                                "/v1/fs/write",
                                &json!({"path": path, "content": content}),
                            )
                            .await
                            .unwrap();
                        let v: Value = client
                            .post("/v1/fs/read", &json!({"path": path}))
                            .await
                            .unwrap();
                        assert_eq!(v["content"].as_str().unwrap(), content);
                    }
                })
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let log: Value = runtime()
        .block_on(client.get("/v1/log?limit=1000"))
        .unwrap();
    // The API's writes: the watcher may also journal a directory a write made on its way (a
    // change it saw beside the API), which is not what this test counts.
    let entries = log["entries"].as_array().unwrap();
    let writes = entries
        .iter()
        .filter(|e| e["via"] == "api" && e["op"] == "write")
        .count();
    assert_eq!(
        writes,
        CLIENTS * 20,
        "every write journaled once: {entries:?}"
    );
}
