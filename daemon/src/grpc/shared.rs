//! The query service's calls run on the shared runtime, off the
//! connection threads that serve ingest (see `crate::listen::ConnThreads`):
//! a long read then never holds up the pushes of the connections beside it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::server::NamedService;
use tower::{Service, ServiceExt as _};

/// `S`, each call of which is evaluated on the shared runtime.
#[derive(Clone)]
pub(super) struct OnShared<S>(pub(super) S);

impl<S: NamedService> NamedService for OnShared<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, R> Service<R> for OnShared<S>
where
    S: Service<R> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // Each call readies its own clone of the service, where it runs.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: R) -> Self::Future {
        let service = self.0.clone();
        Box::pin(crate::listen::on_shared(async move {
            service.oneshot(req).await
        }))
    }
}
