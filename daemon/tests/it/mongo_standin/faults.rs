//! The stand-in's fault injection, as the driver sees it: a write applied
//! but its reply lost, and the server down then back.

use std::time::{Duration, Instant};

use mongodb::bson::{doc, Document};
use mongodb::error::ErrorKind;
use tally_testkit::mongo::mongo_target;

use super::{error_code, target_db};

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
