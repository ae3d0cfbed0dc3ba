//! Property: for any set of accepted samples, in any order, split into any
//! batches and flushes (with flushes replayed as after an ambiguous
//! failure), every slot the embedded store returns equals what a naive
//! reference computes, and every hour and day running slot equals the sum of
//! its minutes. The property itself is in `conformance`, shared
//! with the MongoDB store's run in `mongo_store`.

use std::sync::Arc;

use crate::conformance::{case, check};
use proptest::prelude::*;
use tally::store::embedded::EmbeddedStore;
use tally::store::Store;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn embedded_store_equals_reference(case in case()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        rt.block_on(check(store, &case));
    }
}
