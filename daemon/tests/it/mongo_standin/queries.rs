//! Finds with projection, sort and limit, cursors across batches, and
//! indexes (TTL and drop): how the MongoDB store reads and expires.

use std::time::Duration;

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::IndexOptions;
use mongodb::{Collection, Database, IndexModel};
use tally_testkit::mongo::mongo_target;

use super::{as_i64, error_code, target_db};

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

    check_find_filter_projection_sort_limit(&coll).await;
    check_exclusion_projection_and_skip(&coll).await;
    check_raw_cursor_protocol(&db).await;
    target.cleanup().await;
}

/// Filter, nested inclusion projection, descending sort, limit, and a small
/// batch size so the cursor crosses several getMore calls.
async fn check_find_filter_projection_sort_limit(coll: &Collection<Document>) {
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
}

/// Exclusion projection and skip; mixing inclusion and exclusion is an
/// error, as on a real server.
async fn check_exclusion_projection_and_skip(coll: &Collection<Document>) {
    let d = coll
        .find_one(doc! {})
        .sort(doc! { "k": 1 })
        .skip(5)
        .projection(doc! { "values": 0, "src": 0 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d, doc! { "_id": "s005", "k": 5 });

    let err = coll
        .find_one(doc! {})
        .projection(doc! { "k": 1, "src": 0 })
        .await
        .unwrap_err();
    assert!(error_code(&err).is_some(), "{err:?}");
}

/// Raw cursor protocol: Int64 ids, getMore, killCursors; a cursor drained
/// by getMore reports id 0.
async fn check_raw_cursor_protocol(db: &Database) {
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
