//! Request parameters as Prometheus takes them: from the URL or a
//! form-encoded POST body, with its time and duration formats. Kept apart
//! from the handlers because every endpoint parses the same way.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::response::ApiError;

/// Request parameters from the URL and, for form-encoded POSTs, the body
/// (which wins, as in Prometheus). Repeated keys (`match[]`) keep every
/// value.
pub(super) struct Params(Vec<(String, String)>);

impl<S: Send + Sync> FromRequest<S> for Params {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let url: Vec<(String, String)> = req
            .uri()
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let form = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        let mut pairs = Vec::new();
        if form {
            let body = Bytes::from_request(req, state).await.map_err(|e| {
                let e = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::BadData(
                        "the form body is over the limit on request bodies (http.max_body_bytes)"
                            .into(),
                    )
                } else {
                    ApiError::BadData(format!("reading the form body: {e}"))
                };
                e.into_response()
            })?;
            pairs.extend(form_urlencoded::parse(&body).into_owned());
        }
        pairs.extend(url);
        Ok(Params(pairs))
    }
}

impl Params {
    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    pub(super) fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub(super) fn time_ms(&self, key: &str) -> Result<Option<i64>, ApiError> {
        self.get(key)
            .map(|v| {
                parse_time_ms(v)
                    .map_err(|e| ApiError::BadData(format!("invalid parameter {key:?}: {e}")))
            })
            .transpose()
    }

    pub(super) fn required_time_ms(&self, key: &str) -> Result<i64, ApiError> {
        self.time_ms(key)?.ok_or_else(|| {
            ApiError::BadData(format!(
                "invalid parameter {key:?}: missing (Unix seconds or RFC 3339)"
            ))
        })
    }

    pub(super) fn limit(&self) -> Result<Option<usize>, ApiError> {
        match self.get("limit") {
            None => Ok(None),
            Some(v) => v
                .parse::<usize>()
                .map(|n| (n > 0).then_some(n))
                .map_err(|_| {
                    ApiError::BadData(format!(
                        "invalid parameter \"limit\": {v:?} is not a non-negative integer"
                    ))
                }),
        }
    }
}

/// Unix seconds (fractions allowed) or RFC 3339, to Unix milliseconds.
fn parse_time_ms(s: &str) -> Result<i64, String> {
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 1e13 {
            return Ok((secs * 1000.0).round() as i64);
        }
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| format!("cannot parse {s:?} to a valid timestamp"))
}

/// Seconds (fractions allowed) or a Prometheus duration (`15s`, `1m30s`,
/// `2h`, `1d`, `1w`, `1y`, `500ms`), to milliseconds.
pub(super) fn parse_duration_ms(s: &str) -> Result<i64, String> {
    let bad = || format!("cannot parse {s:?} to a valid duration");
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 1e13 {
            return Ok((secs * 1000.0).round() as i64);
        }
        return Err(bad());
    }
    let mut total: i64 = 0;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let n: i64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_ms: i64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            "y" => 365 * 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(unit_ms)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations() {
        assert_eq!(parse_time_ms("1700000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_time_ms("1700000000.25"), Ok(1_700_000_000_250));
        assert_eq!(
            parse_time_ms("2023-11-14T22:13:20.5Z"),
            Ok(1_700_000_000_500)
        );
        assert!(parse_time_ms("soon").is_err());
        assert_eq!(parse_duration_ms("15"), Ok(15_000));
        assert_eq!(parse_duration_ms("0.5"), Ok(500));
        assert_eq!(parse_duration_ms("1m30s"), Ok(90_000));
        assert_eq!(parse_duration_ms("2h"), Ok(7_200_000));
        assert_eq!(parse_duration_ms("1d"), Ok(86_400_000));
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert!(parse_duration_ms("").is_err());
        assert!(parse_duration_ms("m").is_err());
        assert!(parse_duration_ms("5x").is_err());
    }
}
