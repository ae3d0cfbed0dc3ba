//! Proves the MongoDB stand-in (`tests/mongo-standin`) with the real
//! `mongodb` driver, and pins down the server behaviour Tally's MongoDB store
//! relies on.
//!
//! With `MONGODB_URI` set, the same tests run against that real server (each
//! in a fresh database); the fault-injection tests then print a note and
//! return early.
//!
//! * Here: the handshake, inserts and sessions.
//! * `updates`: update operators and the `update` command.
//! * `queries`: finds, cursors and indexes (TTL included).
//! * `faults`: the stand-in's fault injection.
//! * `fidelity`: where a mongomock-based stand-in is easily kinder than a
//!   server (missing collections, index keys, batch sizes, sessions), on
//!   every MongoDB target.

mod faults;
mod fidelity;
mod queries;
mod updates;

use mongodb::bson::{doc, Bson, Document};
use mongodb::error::{ErrorKind, WriteFailure};
use tally_testkit::mongo::{mongo_target, MongoTarget};

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
