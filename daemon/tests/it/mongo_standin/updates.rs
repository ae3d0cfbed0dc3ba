//! Update operators on nested paths (`$inc`, `$min`, `$max`, `$set`), their
//! conflicts and BSON ordering, and `update` commands of many statements:
//! how the MongoDB store writes slots.

use std::time::Instant;

use mongodb::bson::{doc, Bson, Document};
use mongodb::{Collection, Database};
use tally_testkit::mongo::mongo_target;

use super::{as_i64, error_code, error_message, target_db};

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

    let (updates, bad) = statements_with_conflicts_and_a_no_op();
    let started = Instant::now();
    let reply = db
        .run_command(doc! { "update": "batch", "updates": updates, "ordered": false })
        .await
        .unwrap();
    println!("2,000-statement update took {:?}", started.elapsed());
    let upserts = check_unordered_update_reply(&reply, &bad);

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

    check_ordered_update_stops_at_first_error(&db, &coll).await;

    // The driver's own batching (document sequences) for a big insert.
    let many: Vec<Document> = (10_000..15_000).map(|i| doc! { "_id": i }).collect();
    let r = coll.insert_many(many).await.unwrap();
    assert_eq!(r.inserted_ids.len(), 5000);
    target.cleanup().await;
}

/// 2,000 statements: ids 0..1999, so 500 updates and 1,500 upserts, with
/// conflicting (rejected) statements at every index divisible by 250, and
/// one no-op at index 7. Returns them and the indexes of the conflicting
/// ones.
fn statements_with_conflicts_and_a_no_op() -> (Vec<Document>, Vec<i64>) {
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
    (updates, bad)
}

/// The reply to [`statements_with_conflicts_and_a_no_op`] over the 500
/// existing documents, unordered: counts, upserted ids in statement order,
/// and one write error per conflicting statement. Returns the number of
/// upserts.
fn check_unordered_update_reply(reply: &Document, bad: &[i64]) -> i64 {
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
    upserts
}

/// An ordered batch stops at its first error.
async fn check_ordered_update_stops_at_first_error(db: &Database, coll: &Collection<Document>) {
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
}
