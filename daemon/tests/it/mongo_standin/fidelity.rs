//! Where a mongomock-based stand-in is easily kinder than a server, pinned
//! down on every MongoDB target, so the stand-in is held to what the real
//! servers (FerretDB here, MongoDB through `MONGODB_URI`) do:
//!
//! * `listIndexes` on a missing collection is error 26 NamespaceNotFound,
//!   not an empty list;
//! * an index's `key` is a document (in key order), not an array of pairs;
//! * `batchSize` is honoured: at most that many documents per batch, the
//!   rest by `getMore`, a first batch of 101 without it;
//! * sessions are advertised as `mongod` does (`logicalSessionTimeoutMinutes`
//!   in `hello`), `startSession` hands out a UUID, and a standalone refuses
//!   transaction numbers.

use mongodb::bson::{doc, spec::BinarySubtype, Bson, Document};
use tally_testkit::mongo::{MongoTarget, TargetKind};

use super::{as_i64, error_code};

per_mongo_target!(
    list_indexes_of_a_missing_collection_is_namespace_not_found,
    index_keys_are_documents_in_key_order,
    batch_size_is_honoured_and_the_rest_comes_by_get_more,
    sessions_are_advertised_like_mongod,
);

async fn list_indexes_of_a_missing_collection_is_namespace_not_found(target: MongoTarget) {
    let db = target.db().await;
    let err = db
        .run_command(doc! { "listIndexes": "no_such_collection" })
        .await
        .unwrap_err();
    assert_eq!(error_code(&err), Some(26), "{err:?}");
    let err = db
        .collection::<Document>("no_such_collection")
        .list_indexes()
        .await
        .unwrap_err();
    assert_eq!(error_code(&err), Some(26), "{err:?}");
    target.cleanup().await;
}

async fn index_keys_are_documents_in_key_order(target: MongoTarget) {
    let db = target.db().await;
    db.run_command(doc! {
        "createIndexes": "ix",
        "indexes": [{ "key": { "s": 1, "t": -1 }, "name": "s_1_t_-1" }],
    })
    .await
    .unwrap();
    let reply = db
        .run_command(doc! { "listIndexes": "ix", "cursor": {} })
        .await
        .unwrap();
    let specs = first_batch(&reply);
    assert_eq!(specs.len(), 2, "{reply}");
    for spec in &specs {
        let key = match spec.get("key") {
            Some(Bson::Document(k)) => k,
            other => panic!("an index key must be a document, not {other:?}"),
        };
        match spec.get_str("name").unwrap() {
            "_id_" => assert_eq!(key.keys().collect::<Vec<_>>(), ["_id"]),
            "s_1_t_-1" => {
                assert_eq!(key.keys().collect::<Vec<_>>(), ["s", "t"]);
                assert_eq!(as_i64(key.get("s")), 1);
                assert_eq!(as_i64(key.get("t")), -1);
            }
            other => panic!("unexpected index {other}: {spec}"),
        }
    }
    target.cleanup().await;
}

async fn batch_size_is_honoured_and_the_rest_comes_by_get_more(target: MongoTarget) {
    let db = target.db().await;
    let docs: Vec<Document> = (0..150_i32).map(|i| doc! { "_id": i }).collect();
    db.collection::<Document>("b")
        .insert_many(docs)
        .await
        .unwrap();
    let find = |batch: Option<i32>| {
        let mut cmd = doc! { "find": "b", "filter": { "_id": { "$lt": 7 } }, "sort": { "_id": 1 } };
        if let Some(n) = batch {
            cmd.insert("batchSize", n);
        }
        cmd
    };

    let reply = db.run_command(find(Some(3))).await.unwrap();
    assert_eq!(ids(&first_batch(&reply)), [0, 1, 2]);
    let id = cursor_id(&reply);
    assert_ne!(id, 0, "documents are left: {reply}");
    let more = doc! { "getMore": id, "collection": "b", "batchSize": 3 };
    let reply = db.run_command(more).await.unwrap();
    assert_eq!(ids(&next_batch(&reply)), [3, 4, 5]);
    assert_eq!(cursor_id(&reply), id);
    let reply = db
        .run_command(doc! { "getMore": id, "collection": "b" })
        .await
        .unwrap();
    assert_eq!(ids(&next_batch(&reply)), [6]);
    assert_eq!(cursor_id(&reply), 0, "exhausted: {reply}");

    // batchSize 0 opens a cursor and returns nothing yet.
    let reply = db.run_command(find(Some(0))).await.unwrap();
    assert!(first_batch(&reply).is_empty(), "{reply}");
    assert_ne!(cursor_id(&reply), 0, "{reply}");

    // Without batchSize the first batch is 101 documents.
    let reply = db
        .run_command(doc! { "find": "b", "filter": {} })
        .await
        .unwrap();
    assert_eq!(first_batch(&reply).len(), 101, "{reply}");
    assert_ne!(cursor_id(&reply), 0);
    target.cleanup().await;
}

async fn sessions_are_advertised_like_mongod(target: MongoTarget) {
    let client = target.client().await;
    let admin = client.database("admin");
    let hello = admin.run_command(doc! { "hello": 1 }).await.unwrap();
    let timeout = as_i64(hello.get("logicalSessionTimeoutMinutes"));
    if target.kind != TargetKind::Uri {
        // mongod's default; a real deployment may be configured otherwise.
        assert_eq!(timeout, 30, "{hello}");
    }

    match admin.run_command(doc! { "startSession": 1 }).await {
        Ok(reply) => {
            let id = reply.get_document("id").unwrap();
            match id.get("id") {
                Some(Bson::Binary(b)) => {
                    assert_eq!(b.subtype, BinarySubtype::Uuid);
                    assert_eq!(b.bytes.len(), 16);
                }
                other => panic!("a session id is a UUID, not {other:?}"),
            }
            assert_eq!(as_i64(reply.get("timeoutMinutes")), timeout);
            let end = doc! { "endSessions": [id.clone()] };
            admin.run_command(end).await.unwrap();
        }
        // FerretDB 1.x has no `startSession` (Tally does not use it).
        Err(e) if target.kind.is_ferretdb() => {
            assert_eq!(error_code(&e), Some(59), "{e:?}");
        }
        Err(e) => panic!("startSession: {e:?}"),
    }

    // The driver's implicit and explicit sessions work.
    let coll = client
        .database(&target.database)
        .collection::<Document>("s");
    let mut session = client.start_session().await.unwrap();
    coll.insert_one(doc! { "_id": 1 })
        .session(&mut session)
        .await
        .unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);

    // A standalone (the stand-in's pose) refuses transaction numbers.
    if target.kind == TargetKind::Standin {
        let err = client
            .database(&target.database)
            .run_command(doc! { "find": "s", "txnNumber": 1_i64 })
            .await
            .unwrap_err();
        assert_eq!(error_code(&err), Some(20), "{err:?}");
    }
    target.cleanup().await;
}

fn batch(reply: &Document, name: &str) -> Vec<Document> {
    reply
        .get_document("cursor")
        .and_then(|c| c.get_array(name))
        .unwrap_or_else(|e| panic!("{name}: {e}: {reply}"))
        .iter()
        .map(|d| d.as_document().unwrap().clone())
        .collect()
}

fn first_batch(reply: &Document) -> Vec<Document> {
    batch(reply, "firstBatch")
}

fn next_batch(reply: &Document) -> Vec<Document> {
    batch(reply, "nextBatch")
}

fn cursor_id(reply: &Document) -> i64 {
    reply
        .get_document("cursor")
        .and_then(|c| c.get_i64("id"))
        .unwrap_or_else(|e| panic!("cursor id: {e}: {reply}"))
}

fn ids(docs: &[Document]) -> Vec<i64> {
    docs.iter().map(|d| as_i64(d.get("_id"))).collect()
}
