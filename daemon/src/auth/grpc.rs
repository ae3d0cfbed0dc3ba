//! The gRPC side: an interceptor per service that needs a token, answering
//! `UNAUTHENTICATED` for a missing or unknown token and `PERMISSION_DENIED`
//! for the wrong role, and passing the [`Grant`] on in the request's
//! extensions. Health and reflection are not wrapped: load balancers and
//! tools reach them without a token.

use tonic::{Request, Status};

use super::{count_denied, Authenticator, Denied, Need};

/// Checks the `authorization` metadata of every call to one service.
#[derive(Clone)]
pub struct AuthInterceptor {
    auth: Authenticator,
    need: Need,
}

impl AuthInterceptor {
    pub fn new(auth: Authenticator, need: Need) -> AuthInterceptor {
        AuthInterceptor { auth, need }
    }
}

impl tonic::service::Interceptor for AuthInterceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .map(|v| v.as_encoded_bytes());
        match self.auth.authorize(header, self.need) {
            Ok(grant) => {
                request.extensions_mut().insert(grant);
                Ok(request)
            }
            Err(denied) => Err(refuse(&denied)),
        }
    }
}

fn refuse(denied: &Denied) -> Status {
    count_denied("grpc", denied);
    if denied.is_forbidden() {
        Status::permission_denied(denied.to_string())
    } else {
        Status::unauthenticated(denied.to_string())
    }
}
