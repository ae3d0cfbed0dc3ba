//! Proves the MongoDB stand-in (`tests/mongo-standin`) with the real
//! `mongodb` driver, and pins down the server behaviour Tally's MongoDB store
//! relies on.
//!
//! With `MONGODB_URI` set, the same tests run against that real server (each
//! in a fresh database); the fault-injection tests then print a note and
//! return early.

mod support;

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::options::IndexOptions;
use mongodb::IndexModel;
use support::standin::{mongo_target, MongoTarget};

/// The server error code of a failed write (or command).
fn error_code(err: &mongodb::error::Error) -> Option<i32> {
    match &*err.kind {
        ErrorKind::Write(WriteFailure::WriteError(e)) => Some(e.code),
        ErrorKind::Command(e) => Some(e.code),
        _ => None,
    }
}

fn error_message(err: &mongodb::error::Error) -> String {
    match &*err.kind {
        ErrorKind::Write(WriteFailure::WriteError(e)) => e.message.clone(),
        ErrorKind::Command(e) => e.message.clone(),
        other => format!("{other:?}"),
    }
}

fn as_i64(v: Option<&Bson>) -> i64 {
    match v {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(f)) => *f as i64,
        other => panic!("not an integer: {other:?}"),
    }
}

async fn target_db(target: &MongoTarget) -> mongodb::Database {
    target.db().await
}

#[tokio::test]
async fn ping_hello_and_build_info() {
    let target = mongo_target().await;
    let client = target.client().await;
    let admin = client.database("admin");

    let pong = admin.run_command(doc! { "ping": 1 }).await.unwrap();
    assert_eq!(as_i64(pong.get("ok")), 1);

    let hello = admin.run_command(doc! { "hello": 1 }).await.unwrap();
    assert!(hello.get_bool("isWritablePrimary").unwrap());
    assert!(as_i64(hello.get("maxWireVersion")) >= 17, "{hello:?}");
    assert!(as_i64(hello.get("maxBsonObjectSize")) >= 16 * 1024 * 1024);
    assert!(as_i64(hello.get("maxWriteBatchSize")) >= 100_000);
    assert!(hello.get("logicalSessionTimeoutMinutes").is_some());
    assert!(hello.get("connectionId").is_some());

    let legacy = admin.run_command(doc! { "isMaster": 1 }).await.unwrap();
    assert!(legacy.get_bool("ismaster").unwrap());

    let info = admin.run_command(doc! { "buildInfo": 1 }).await.unwrap();
    let version = info.get_str("version").unwrap();
    if target.is_real_server() {
        println!("real server version {version}");
    } else {
        assert_eq!(version, "7.0.0");
    }

    let unknown = admin
        .run_command(doc! { "noSuchCommand": 1 })
        .await
        .unwrap_err();
    assert_eq!(error_code(&unknown), Some(59), "{unknown:?}");
    target.cleanup().await;
}

#[tokio::test]
async fn insert_many_unordered_reports_each_duplicate() {
    let target = mongo_target().await;
    let db = target_db(&target).await;
    let coll = db.collection::<Document>("dups");
    coll.insert_many([doc! { "_id": 1, "v": "a" }, doc! { "_id": 2, "v": "b" }])
        .await
        .unwrap();

    let err = coll
        .insert_many([
            doc! { "_id": 1, "v": "again" },
            doc! { "_id": 3, "v": "c" },
            doc! { "_id": 2, "v": "again" },
            doc! { "_id": 4, "v": "d" },
        ])
        .ordered(false)
        .await
        .unwrap_err();
    match &*err.kind {
        ErrorKind::InsertMany(e) => {
            let errors = e.write_errors.as_ref().expect("write errors");
            let indexes: Vec<usize> = errors.iter().map(|e| e.index).collect();
            assert_eq!(indexes, vec![0, 2]);
            for e in errors {
                assert_eq!(e.code, 11000);
                assert!(
                    e.message.contains("E11000 duplicate key error"),
                    "{}",
                    e.message
                );
            }
        }
        other => panic!("expected an InsertMany error, got {other:?}"),
    }
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 4);
    let one = coll.find_one(doc! { "_id": 1 }).await.unwrap().unwrap();
    assert_eq!(
        one.get_str("v").unwrap(),
        "a",
        "the duplicate must not overwrite"
    );

    // The same through a raw command: n counts the inserted documents.
    let reply = db
        .run_command(doc! {
            "insert": "dups",
            "documents": [ { "_id": 4 }, { "_id": 5 }, { "_id": 6 } ],
            "ordered": false,
        })
        .await
        .unwrap();
    assert_eq!(as_i64(reply.get("n")), 2);
    let errors = reply.get_array("writeErrors").unwrap();
    assert_eq!(errors.len(), 1);
    let e = errors[0].as_document().unwrap();
    assert_eq!(as_i64(e.get("index")), 0);
    assert_eq!(as_i64(e.get("code")), 11000);

    // Ordered (the default) stops at the first error.
    let err = coll
        .insert_many([doc! { "_id": 7 }, doc! { "_id": 1 }, doc! { "_id": 8 }])
        .await
        .unwrap_err();
    assert!(matches!(&*err.kind, ErrorKind::InsertMany(_)), "{err:?}");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 7);
    target.cleanup().await;
}

#[tokio::test]
async fn upsert_with_inc_min_max_on_nested_paths() {
    let target = mongo_target().await;
    let db = target_db(&target).await;
    let coll = db.collection::<Document>("day");
    let update = |n: i64, v: f64| {
        doc! {
            "$inc": {
                "values.23.59.n": n,
                "values.23.59.sum": v,
                "values.23.n": n,
                "n": n,
            },
            "$min": { "values.23.59.min": v, "values.23.min": v },
            "$max": { "values.23.59.max": v, "values.23.max": v },
        }
    };
    let r = coll
        .update_one(doc! { "_id": "src:cpu:2024-01-01" }, update(1, 2.5))
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(r.matched_count, 0);
    assert_eq!(
        r.upserted_id,
        Some(Bson::String("src:cpu:2024-01-01".into()))
    );

    let r = coll
        .update_one(doc! { "_id": "src:cpu:2024-01-01" }, update(2, -1.0))
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(r.matched_count, 1);
    assert_eq!(r.modified_count, 1);
    assert!(r.upserted_id.is_none());

    let d = coll
        .find_one(doc! { "_id": "src:cpu:2024-01-01" })
        .await
        .unwrap()
        .unwrap();
    let slot = d
        .get_document("values")
        .and_then(|v| v.get_document("23"))
        .and_then(|h| h.get_document("59"))
        .unwrap();
    // Int64 stays Int64 through $inc, as on a real server.
    assert_eq!(slot.get_i64("n").unwrap(), 3);
    assert_eq!(slot.get_f64("sum").unwrap(), 1.5);
    assert_eq!(slot.get_f64("min").unwrap(), -1.0);
    assert_eq!(slot.get_f64("max").unwrap(), 2.5);
    let hour = d
        .get_document("values")
        .unwrap()
        .get_document("23")
        .unwrap();
    assert_eq!(hour.get_i64("n").unwrap(), 3);
    assert_eq!(d.get_i64("n").unwrap(), 3);

    // Int32 + Int32 stays Int32; Int32 + Double becomes Double.
    coll.insert_one(doc! { "_id": "types", "i": 1_i32, "d": 1_i32 })
        .await
        .unwrap();
    coll.update_one(
        doc! { "_id": "types" },
        doc! { "$inc": { "i": 2_i32, "d": 0.5 } },
    )
    .await
    .unwrap();
    let t = coll
        .find_one(doc! { "_id": "types" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.get_i32("i").unwrap(), 3);
    assert_eq!(t.get_f64("d").unwrap(), 1.5);

    // An update that changes nothing is matched but not modified.
    let r = coll
        .update_one(doc! { "_id": "types" }, doc! { "$max": { "i": 0 } })
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 0));
    target.cleanup().await;
}

#[tokio::test]
async fn conflicting_update_paths_are_rejected() {
    let target = mongo_target().await;
    let db = target_db(&target).await;
    let coll = db.collection::<Document>("conflicts");
    coll.insert_one(doc! { "_id": 1, "values": { "1": { "n": 0 } }, "a": 0 })
        .await
        .unwrap();

    let cases = [
        (
            doc! { "$inc": { "values.1.n": 1 }, "$set": { "values.1": { "n": 5 } } },
            "values.1",
        ),
        (doc! { "$set": { "a": 1 }, "$inc": { "a": 1 } }, "a"),
        (
            doc! { "$set": { "values.1": { "n": 1 } }, "$max": { "values.1.n": 9 } },
            "values.1",
        ),
        (
            doc! { "$setOnInsert": { "values": {} }, "$inc": { "values.2.n": 1 } },
            "values",
        ),
    ];
    for (update, at) in cases {
        for upsert in [false, true] {
            let filter = if upsert {
                doc! { "_id": 99 }
            } else {
                doc! { "_id": 1 }
            };
            let err = coll
                .update_one(filter, update.clone())
                .upsert(upsert)
                .await
                .expect_err("a real server rejects conflicting paths");
            assert_eq!(error_code(&err), Some(40), "{update:?}: {err:?}");
            let msg = error_message(&err);
            assert!(
                msg.contains("would create a conflict at") && msg.contains(&format!("'{at}'")),
                "{update:?}: {msg}"
            );
        }
    }
    // Nothing was applied or upserted.
    let d = coll.find_one(doc! { "_id": 1 }).await.unwrap().unwrap();
    assert_eq!(d, doc! { "_id": 1, "values": { "1": { "n": 0 } }, "a": 0 });
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);

    // Sibling paths do not conflict.
    coll.update_one(
        doc! { "_id": 1 },
        doc! { "$inc": { "values.1.n": 1 }, "$set": { "values.1x": 1, "values.2": { "n": 0 } } },
    )
    .await
    .unwrap();
    target.cleanup().await;
}

#[tokio::test]
async fn min_max_against_null_follow_bson_order() {
    let target = mongo_target().await;
    let db = target_db(&target).await;
    let coll = db.collection::<Document>("nulls");
    coll.insert_one(doc! {
        "_id": 1,
        "s": { "n": 0, "min": Bson::Null, "max": Bson::Null },
        "t": { "min": f64::INFINITY, "max": f64::NEG_INFINITY },
    })
    .await
    .unwrap();
    coll.update_one(
        doc! { "_id": 1 },
        doc! {
            "$min": { "s.min": 5.0, "t.min": 5.0 },
            "$max": { "s.max": 5.0, "t.max": 5.0 },
        },
    )
    .await
    .unwrap();
    let d = coll.find_one(doc! { "_id": 1 }).await.unwrap().unwrap();
    let s = d.get_document("s").unwrap();
    // null sorts below every number: $min keeps it, $max replaces it.
    assert_eq!(s.get("min"), Some(&Bson::Null));
    assert_eq!(s.get_f64("max").unwrap(), 5.0);
    // ±infinity are the empty values $min/$max really replace.
    let t = d.get_document("t").unwrap();
    assert_eq!(t.get_f64("min").unwrap(), 5.0);
    assert_eq!(t.get_f64("max").unwrap(), 5.0);

    // $inc of a null field fails (code 14) and leaves the document intact.
    let err = coll
        .update_one(doc! { "_id": 1 }, doc! { "$inc": { "s.n": 1, "s.min": 1 } })
        .await
        .unwrap_err();
    assert_eq!(error_code(&err), Some(14), "{err:?}");
    let after = coll.find_one(doc! { "_id": 1 }).await.unwrap().unwrap();
    assert_eq!(after, d, "a failed update must not be half-applied");

    // Creating a field inside a scalar fails with PathNotViable.
    let err = coll
        .update_one(doc! { "_id": 1 }, doc! { "$inc": { "s.n.x": 1 } })
        .await
        .unwrap_err();
    assert_eq!(error_code(&err), Some(28), "{err:?}");
    target.cleanup().await;
}

#[tokio::test]
async fn update_command_with_many_statements() {
    let target = mongo_target().await;
    let db = target_db(&target).await;
    let coll = db.collection::<Document>("batch");
    // 500 existing documents.
    let existing: Vec<Document> = (0..500).map(|i| doc! { "_id": i, "n": 0_i64 }).collect();
    coll.insert_many(existing).await.unwrap();

    // 2,000 statements: ids 0..1999, so 500 updates and 1,500 upserts, with
    // conflicting (rejected) statements at every index divisible by 250,
    // and one no-op at index 7.
    let mut updates = Vec::new();
    let mut bad = Vec::new();
    for i in 0..2000_i32 {
        let u = if i % 250 == 0 {
            bad.push(i as i64);
            doc! { "$inc": { "n": 1_i64 }, "$set": { "n": 5_i64 } }
        } else if i == 7 {
            doc! { "$max": { "n": -1_i64 } }
        } else {
            doc! { "$inc": { "n": 1_i64, "minute.59.n": 1_i64 } }
        };
        updates.push(doc! { "q": { "_id": i }, "u": u, "upsert": true });
    }
    let started = Instant::now();
    let reply = db
        .run_command(doc! { "update": "batch", "updates": updates, "ordered": false })
        .await
        .unwrap();
    println!("2,000-statement update took {:?}", started.elapsed());

    let bad_existing = bad.iter().filter(|&&i| i < 500).count() as i64; // 0, 250
    let bad_new = bad.len() as i64 - bad_existing; // 500, 750, ..., 1750
    let upserts = 1500 - bad_new;
    let matched = 500 - bad_existing;
    assert_eq!(as_i64(reply.get("n")), matched + upserts, "{reply:?}");
    assert_eq!(
        as_i64(reply.get("nModified")),
        matched - 1,
        "index 7 is a no-op"
    );

    let upserted = reply.get_array("upserted").unwrap();
    assert_eq!(upserted.len() as i64, upserts);
    for (k, u) in upserted.iter().enumerate() {
        let u = u.as_document().unwrap();
        let index = as_i64(u.get("index"));
        assert!(index >= 500 && index % 250 != 0, "{u:?}");
        assert_eq!(as_i64(u.get("_id")), index);
        if k > 0 {
            let prev = as_i64(upserted[k - 1].as_document().unwrap().get("index"));
            assert!(prev < index, "upserted entries are in statement order");
        }
    }
    let errors = reply.get_array("writeErrors").unwrap();
    let indexes: Vec<i64> = errors
        .iter()
        .map(|e| as_i64(e.as_document().unwrap().get("index")))
        .collect();
    assert_eq!(indexes, bad);
    for e in errors {
        assert_eq!(as_i64(e.as_document().unwrap().get("code")), 40);
    }

    assert_eq!(
        coll.count_documents(doc! {}).await.unwrap() as i64,
        500 + upserts
    );
    let d = coll.find_one(doc! { "_id": 1999 }).await.unwrap().unwrap();
    assert_eq!(d.get_i64("n").unwrap(), 1);
    let d = coll.find_one(doc! { "_id": 250 }).await.unwrap().unwrap();
    assert_eq!(
        d.get_i64("n").unwrap(),
        0,
        "rejected statement left it alone"
    );

    // An ordered batch stops at its first error.
    let reply = db
        .run_command(doc! {
            "update": "batch",
            "updates": [
                { "q": { "_id": 1 }, "u": { "$inc": { "n": 1_i64 } } },
                { "q": { "_id": 2 }, "u": { "$inc": { "n": 1_i64 }, "$set": { "n": 0_i64 } } },
                { "q": { "_id": 3 }, "u": { "$inc": { "n": 1_i64 } } },
            ],
        })
        .await
        .unwrap();
    assert_eq!(as_i64(reply.get("n")), 1);
    assert_eq!(reply.get_array("writeErrors").unwrap().len(), 1);
    let d = coll.find_one(doc! { "_id": 3 }).await.unwrap().unwrap();
    assert_eq!(
        d.get_i64("n").unwrap(),
        1,
        "statement after the error not applied"
    );

    // The driver's own batching (document sequences) for a big insert.
    let many: Vec<Document> = (10_000..15_000).map(|i| doc! { "_id": i }).collect();
    let r = coll.insert_many(many).await.unwrap();
    assert_eq!(r.inserted_ids.len(), 5000);
    target.cleanup().await;
}

#[tokio::test]
async fn find_projection_sort_limit_and_cursors() {
    let target = mongo_target().await;
    let db = target_db(&target).await;
    let coll = db.collection::<Document>("hours");
    let docs: Vec<Document> = (0..250_i32)
        .map(|i| {
            doc! {
                "_id": format!("s{i:03}"),
                "k": i,
                "src": if i % 2 == 0 { "even" } else { "odd" },
                "values": { "3": { "h": i, "x": 1 }, "4": { "h": -i } },
            }
        })
        .collect();
    coll.insert_many(docs).await.unwrap();

    // Filter, nested inclusion projection, descending sort, limit, and a
    // small batch size so the cursor crosses several getMore calls.
    let mut cursor = coll
        .find(doc! { "src": "even", "k": { "$gte": 10 } })
        .projection(doc! { "values.3.h": 1 })
        .sort(doc! { "k": -1 })
        .limit(100)
        .batch_size(7)
        .await
        .unwrap();
    let mut got = Vec::new();
    while let Some(d) = cursor.try_next().await.unwrap() {
        got.push(d);
    }
    assert_eq!(got.len(), 100);
    assert_eq!(
        got[0],
        doc! { "_id": "s248", "values": { "3": { "h": 248 } } }
    );
    let ks: Vec<i32> = got
        .iter()
        .map(|d| {
            d.get_document("values")
                .unwrap()
                .get_document("3")
                .unwrap()
                .get_i32("h")
                .unwrap()
        })
        .collect();
    let expected: Vec<i32> = (10..250).rev().filter(|k| k % 2 == 0).take(100).collect();
    assert_eq!(ks, expected);

    // Exclusion projection and skip.
    let d = coll
        .find_one(doc! {})
        .sort(doc! { "k": 1 })
        .skip(5)
        .projection(doc! { "values": 0, "src": 0 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d, doc! { "_id": "s005", "k": 5 });

    // Mixing inclusion and exclusion is an error, as on a real server.
    let err = coll
        .find_one(doc! {})
        .projection(doc! { "k": 1, "src": 0 })
        .await
        .unwrap_err();
    assert!(error_code(&err).is_some(), "{err:?}");

    // Raw cursor protocol: Int64 ids, getMore, killCursors.
    let first = db
        .run_command(doc! { "find": "hours", "filter": {}, "sort": { "k": 1 }, "batchSize": 5 })
        .await
        .unwrap();
    let cur = first.get_document("cursor").unwrap();
    let id = cur.get_i64("id").expect("cursor id is an Int64");
    assert_ne!(id, 0);
    assert_eq!(cur.get_array("firstBatch").unwrap().len(), 5);
    let ns = cur.get_str("ns").unwrap();
    assert!(ns.ends_with(".hours"), "{ns}");

    let more = db
        .run_command(doc! { "getMore": id, "collection": "hours", "batchSize": 10 })
        .await
        .unwrap();
    let cur = more.get_document("cursor").unwrap();
    assert_eq!(cur.get_i64("id").unwrap(), id);
    let next = cur.get_array("nextBatch").unwrap();
    assert_eq!(next.len(), 10);
    assert_eq!(
        next[0].as_document().unwrap().get_str("_id").unwrap(),
        "s005"
    );

    let killed = db
        .run_command(doc! { "killCursors": "hours", "cursors": [id] })
        .await
        .unwrap();
    assert_eq!(
        killed.get_array("cursorsKilled").unwrap(),
        &vec![Bson::Int64(id)]
    );
    let err = db
        .run_command(doc! { "getMore": id, "collection": "hours" })
        .await
        .unwrap_err();
    assert_eq!(error_code(&err), Some(43), "{err:?}");

    // A cursor drained by getMore reports id 0.
    let first = db
        .run_command(doc! { "find": "hours", "filter": { "k": { "$lt": 12 } }, "batchSize": 10 })
        .await
        .unwrap();
    let id = first.get_document("cursor").unwrap().get_i64("id").unwrap();
    let more = db
        .run_command(doc! { "getMore": id, "collection": "hours" })
        .await
        .unwrap();
    let cur = more.get_document("cursor").unwrap();
    assert_eq!(cur.get_i64("id").unwrap(), 0);
    assert_eq!(cur.get_array("nextBatch").unwrap().len(), 2);
    target.cleanup().await;
}

#[tokio::test]
async fn indexes_ttl_and_drop() {
    let target = mongo_target().await;
    let db = target_db(&target).await;
    let coll = db.collection::<Document>("ttl");
    let ttl_index = |secs: u64| {
        IndexModel::builder()
            .keys(doc! { "expireAt": 1 })
            .options(
                IndexOptions::builder()
                    .name("expire_at".to_string())
                    .expire_after(Duration::from_secs(secs))
                    .build(),
            )
            .build()
    };
    let created = coll.create_index(ttl_index(3600)).await.unwrap();
    assert_eq!(created.index_name, "expire_at");
    // Creating the identical index again is a no-op.
    coll.create_index(ttl_index(3600)).await.unwrap();
    coll.create_index(
        IndexModel::builder()
            .keys(doc! { "src": 1, "t": -1 })
            .build(),
    )
    .await
    .unwrap();

    let mut specs: Vec<Document> = Vec::new();
    let mut cursor = coll.list_indexes().await.unwrap();
    while let Some(ix) = cursor.try_next().await.unwrap() {
        specs.push(mongodb::bson::to_document(&ix).unwrap());
    }
    let names: Vec<String> = {
        let mut v: Vec<String> = specs
            .iter()
            .map(|s| s.get_str("name").unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names, vec!["_id_", "expire_at", "src_1_t_-1"]);
    let ttl = specs
        .iter()
        .find(|s| s.get_str("name").unwrap() == "expire_at")
        .unwrap();
    assert_eq!(as_i64(ttl.get("expireAfterSeconds")), 3600);

    // Same name, different TTL: IndexOptionsConflict (85).
    let err = coll.create_index(ttl_index(60)).await.unwrap_err();
    assert_eq!(error_code(&err), Some(85), "{err:?}");

    // collMod changes the TTL in place.
    let reply = db
        .run_command(doc! {
            "collMod": "ttl",
            "index": { "name": "expire_at", "expireAfterSeconds": 60 },
        })
        .await
        .unwrap();
    assert_eq!(as_i64(reply.get("expireAfterSeconds_new")), 60);

    // A TTL pass removes expired documents (stand-in only: a real server's
    // monitor runs every 60 s).
    if let Some(standin) = target.standin() {
        let past = mongodb::bson::DateTime::from_millis(
            mongodb::bson::DateTime::now().timestamp_millis() - 3_600_000,
        );
        coll.insert_many([
            doc! { "_id": "old", "expireAt": past },
            doc! { "_id": "new", "expireAt": mongodb::bson::DateTime::now() },
            doc! { "_id": "none" },
        ])
        .await
        .unwrap();
        assert_eq!(standin.ttl_pass(), 1);
        assert!(coll
            .find_one(doc! { "_id": "old" })
            .await
            .unwrap()
            .is_none());
        assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 2);
    }

    coll.drop().await.unwrap();
    let names = db.list_collection_names().await.unwrap();
    assert!(!names.contains(&"ttl".to_string()), "{names:?}");
    let err = db
        .run_command(doc! { "listIndexes": "ttl" })
        .await
        .unwrap_err();
    assert_eq!(error_code(&err), Some(26), "{err:?}");
    // Dropping a missing collection is fine.
    coll.drop().await.unwrap();
    target.cleanup().await;
}

#[tokio::test]
async fn end_sessions_and_client_shutdown() {
    let target = mongo_target().await;
    let client = target.client().await;
    let db = client.database(&target.database);
    // Runs in an explicit session, which the shutdown below ends.
    let mut session = client.start_session().await.unwrap();
    db.collection::<Document>("s")
        .insert_one(doc! { "_id": 1 })
        .session(&mut session)
        .await
        .unwrap();
    let id = session.id().clone();
    let reply = client
        .database("admin")
        .run_command(doc! { "endSessions": [id] })
        .await
        .unwrap();
    assert_eq!(as_i64(reply.get("ok")), 1);
    drop(session);
    client.shutdown().await;
    target.cleanup().await;
}

#[tokio::test]
async fn drop_after_apply_is_an_ambiguous_failure() {
    let target = mongo_target().await;
    let Some(standin) = target.standin() else {
        println!("note: fault injection needs the stand-in; skipped against MONGODB_URI");
        return;
    };
    let db = target_db(&target).await;
    let coll = db.collection::<Document>("amb");
    coll.insert_one(doc! { "_id": "a", "n": 0_i64 })
        .await
        .unwrap();

    standin.drop_after_apply(1).await;
    let err = coll
        .update_one(doc! { "_id": "a" }, doc! { "$inc": { "n": 1_i64 } })
        .await
        .expect_err("the reply was dropped");
    assert!(
        matches!(
            &*err.kind,
            ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. }
        ),
        "expected a network error, got {err:?}"
    );
    // ...but the write happened.
    let d = coll.find_one(doc! { "_id": "a" }).await.unwrap().unwrap();
    assert_eq!(d.get_i64("n").unwrap(), 1);

    // Only one write was affected.
    coll.update_one(doc! { "_id": "a" }, doc! { "$inc": { "n": 1_i64 } })
        .await
        .unwrap();
    let d = coll.find_one(doc! { "_id": "a" }).await.unwrap().unwrap();
    assert_eq!(d.get_i64("n").unwrap(), 2);

    // fail_next: rejected and not applied.
    standin.fail_next(1, 91);
    let err = coll
        .update_one(doc! { "_id": "a" }, doc! { "$inc": { "n": 1_i64 } })
        .await
        .unwrap_err();
    assert_eq!(error_code(&err), Some(91), "{err:?}");
    let d = coll.find_one(doc! { "_id": "a" }).await.unwrap().unwrap();
    assert_eq!(d.get_i64("n").unwrap(), 2);
}

#[tokio::test]
async fn set_down_fails_commands_until_it_is_back() {
    let target = mongo_target().await;
    let Some(standin) = target.standin() else {
        println!("note: fault injection needs the stand-in; skipped against MONGODB_URI");
        return;
    };
    let client = target.client().await;
    let admin = client.database("admin");
    admin.run_command(doc! { "ping": 1 }).await.unwrap();

    standin.set_down(true);
    let started = Instant::now();
    let err = admin.run_command(doc! { "ping": 1 }).await.unwrap_err();
    println!("while down: {:?} after {:?}", err.kind, started.elapsed());
    assert!(
        matches!(
            &*err.kind,
            ErrorKind::ServerSelection { .. }
                | ErrorKind::Io(_)
                | ErrorKind::ConnectionPoolCleared { .. }
        ),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));

    standin.set_down(false);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match admin.run_command(doc! { "ping": 1 }).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                println!("not back yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the stand-in did not come back: {e:?}"),
        }
    }
    // Writes work again on the same client.
    client
        .database(&target.database)
        .collection::<Document>("back")
        .insert_one(doc! { "_id": 1 })
        .await
        .unwrap();
}
