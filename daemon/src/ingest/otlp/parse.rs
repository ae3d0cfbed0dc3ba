//! Reads an OTLP `ExportMetricsServiceRequest` from its (inflated) bytes
//! straight into a [`PushView`], making exactly the mapping the owned
//! conversion makes (`convert` in the parent module, which a property test
//! holds this to): every source, metric name, label name and label value a
//! slice of the body where the body holds it as it is, the rest (numbers
//! made label text, `le` and `quantile` bounds, `_count`/`_sum`/`_bucket`
//! names, a joined `service.namespace/service.name`) made in a per-request
//! arena, and every number appended to the view's columns. No owned OTLP
//! message is made on the way, and none of `tally.v1`'s.
//!
//! Protobuf lets fields come in any order, while the mapping needs some
//! before others: a resource's attributes (its source and labels) before
//! its metrics, a metric's name and type before its points. A resource is
//! walked twice, first for what must be known, then for the rest; a
//! metric once for its name and type, then from where the data that
//! counts starts, for the data's shape (a sum's temporality) and its
//! points (found while the shape is read, when the data is one body). A
//! message field sent twice is merged, as prost merges it: a resource's
//! attributes are those of all its `resource` fields, and a metric's data
//! is the last run of its oneof's last member, their points in order.

use bumpalo::Bump;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    ExponentialHistogram, Gauge, Histogram, Sum, Summary,
};
use prost::encoding::{
    bool as pbool, double, fixed64, int32, message, sint32, uint32, DecodeContext, WireType,
};
use prost::Message as _;

use super::wire::{self, fields, key_value, prim, skip, Attr};
use super::OtlpConfig;
use crate::aggregator::{IngestOutcome, RejectReason, Rejection};
use crate::ingest::builder::Budget;
use crate::ingest::key_names::KeyNames;
use crate::ingest::text::TextMemo;
pub use crate::ingest::view::ParseError;
use crate::ingest::view::{borrow_str, PushView, ViewBuilder, ViewError};

mod fast;
mod map;

/// An OTLP request read into a view of its bytes.
pub struct OtlpView<'a> {
    pub view: PushView<'a>,
    /// Samples refused while reading.
    pub refused: IngestOutcome,
    /// The point each series came from, in the order series were read.
    point_of: Vec<u32>,
    /// The order each series of the view was read in, by its place in the
    /// view (empty when the same).
    read_order: Vec<u32>,
    /// Points in the request.
    pub points: u32,
    /// Points refused while reading.
    refused_points: u64,
}

impl OtlpView<'_> {
    /// The points `out` refused, counted as [`super::OtlpRequest`] counts
    /// them.
    pub fn rejected_points(&self, out: &IngestOutcome) -> u64 {
        let point = |r: &Rejection| {
            let at = self.view.series_at(r.source_index, r.series_index)?;
            let read = self.read_order.get(at).map_or(at, |&o| o as usize);
            self.point_of.get(read).copied()
        };
        super::count_rejected(out, self.refused_points, self.points, point)
    }
}

/// Reads `bytes`, making what must be made in `arena`; `Full` when the
/// request would exceed `budget`. A body prost refuses is refused, with
/// prost's message, whatever else is wrong with it.
pub fn parse<'a>(
    bytes: &'a [u8],
    arena: &'a Bump,
    cfg: &OtlpConfig,
    cap: usize,
    budget: Budget,
) -> Result<OtlpView<'a>, ParseError> {
    let mut r = Reader::new(arena, cfg, cap, budget);
    // A number point with a timestamp, a value and a couple of attributes
    // is at least about 32 bytes.
    r.b.reserve_for(bytes.len(), 32, 2);
    let read = fields(bytes, |buf, tag, wire_type| match tag {
        1 => {
            let rm = wire::body(wire_type, buf)?;
            r.resource_metrics(rm)
        }
        _ => Ok(skip(wire_type, tag, buf)?),
    })
    .map_err(|e| e.at("ExportMetricsServiceRequest", "resource_metrics"));
    match read {
        Ok(()) => {}
        // The budget ran out before the whole body was read: what prost
        // would say of the rest comes first (a rare, refused request, so
        // decoding it whole costs nothing that matters).
        Err(ParseError::Full) => {
            return Err(match ExportMetricsServiceRequest::decode(bytes) {
                Ok(_) => ParseError::Full,
                Err(e) => ParseError::Wire(ViewError::Wire(e)),
            })
        }
        Err(e) => return Err(e),
    }
    let (view, refused, read_order) = r.b.finish_ordered();
    Ok(OtlpView {
        view,
        refused,
        point_of: r.point_of,
        read_order,
        points: r.points,
        refused_points: r.refused_points,
    })
}

/// Most points of one metric whose places are kept while its shape is
/// read (16 bytes each); a metric with more is walked again for them.
const GATHERED_POINTS: usize = 4096;

/// The members of `Metric`'s `data` oneof, by tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Variant {
    Gauge = 5,
    Sum = 7,
    Histogram = 9,
    Exponential = 10,
    Summary = 11,
}

impl Variant {
    fn of(tag: u32) -> Option<Variant> {
        Some(match tag {
            5 => Variant::Gauge,
            7 => Variant::Sum,
            9 => Variant::Histogram,
            10 => Variant::Exponential,
            11 => Variant::Summary,
            _ => return None,
        })
    }

    fn field(self) -> &'static str {
        match self {
            Variant::Gauge => "gauge",
            Variant::Sum => "sum",
            Variant::Histogram => "histogram",
            Variant::Exponential => "exponential_histogram",
            Variant::Summary => "summary",
        }
    }

    /// Checks with prost a member the oneof's last member replaced: prost
    /// decoded it before replacing it (rare: a metric of two types).
    fn check_replaced(self, wire_type: WireType, buf: &mut &[u8]) -> Result<(), ViewError> {
        let ctx = DecodeContext::default();
        let r = match self {
            Variant::Gauge => message::merge(wire_type, &mut Gauge::default(), buf, ctx),
            Variant::Sum => message::merge(wire_type, &mut Sum::default(), buf, ctx),
            Variant::Histogram => message::merge(wire_type, &mut Histogram::default(), buf, ctx),
            Variant::Exponential => {
                message::merge(wire_type, &mut ExponentialHistogram::default(), buf, ctx)
            }
            Variant::Summary => message::merge(wire_type, &mut Summary::default(), buf, ctx),
        };
        prim(r, "Metric", self.field())
    }
}

/// A metric's data: the member of the oneof that counts, where in the
/// metric's bytes the fields that count start (the oneof's fields before
/// it were replaced), and whether any were.
struct Data<'a> {
    variant: Variant,
    from: usize,
    replaced: bool,
    /// The body that counts when it is the only one (as good as always),
    /// so that its points are found without walking the metric again.
    only: Option<&'a [u8]>,
}

impl<'a> Data<'a> {
    /// Calls `body` with each of the bodies that count in `m`, the
    /// metric's bytes, in order: the fields given for the data's member
    /// from `from` on (every oneof field there is of that member).
    fn bodies<E: From<ViewError>>(
        &self,
        m: &'a [u8],
        mut body: impl FnMut(&'a [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if let Some(only) = self.only {
            return body(only);
        }
        fields(&m[self.from..], |buf, tag, wire_type| {
            if Variant::of(tag).is_none() {
                return Ok(skip(wire_type, tag, buf)?);
            }
            body(wire::body(wire_type, buf)?)
        })
    }
}

/// A request being read.
pub(super) struct Reader<'a, 'c> {
    pub(super) b: ViewBuilder<'a>,
    pub(super) arena: &'a Bump,
    cfg: &'c OtlpConfig,
    /// `otlp.resource_labels`: each key and the label name it makes.
    resource_label_names: Vec<(&'c str, &'a str)>,
    pub(super) point_of: Vec<u32>,
    pub(super) points: u32,
    pub(super) refused_points: u64,
    /// The resource's attributes, then the labels it gives every point.
    resource_attrs: Vec<(&'a str, Attr<'a>)>,
    pub(super) resource_labels: Vec<(&'a str, &'a str)>,
    /// The resource's source; None when it has none of the attributes.
    pub(super) source: Option<&'a str>,
    /// The point being read: its attributes, its labels, and its numbers
    /// that come in arrays. Kept from point to point, so that reading one
    /// allocates nothing once they have grown.
    pub(super) attrs: Vec<(&'a str, Attr<'a>)>,
    pub(super) labels: Vec<(&'a str, &'a str)>,
    pub(super) counts: Vec<u64>,
    pub(super) bounds: Vec<f64>,
    pub(super) quantiles: Vec<(f64, f64)>,
    pub(super) scratch_counts: Vec<u64>,
    /// The metric's points' bytes, found while reading its shape.
    gathered: Vec<&'a [u8]>,
    /// Where text is made before it goes to the arena.
    pub(super) scratch: String,
    /// Names and attributes already checked as UTF-8 in this request.
    memo: TextMemo<'a>,
    /// Attribute keys renamed as labels in this request.
    pub(super) key_names: KeyNames<'a>,
    /// The open point's start time in milliseconds (0: not given).
    pub(super) start_ms: i64,
    /// Whether the open point is flagged "no recorded value": each of its
    /// series gets a staleness marker instead of a value.
    pub(super) ended: bool,
}

impl<'a, 'c> Reader<'a, 'c> {
    fn new(arena: &'a Bump, cfg: &'c OtlpConfig, cap: usize, budget: Budget) -> Self {
        let resource_label_names = cfg
            .resource_labels
            .iter()
            .map(|key| {
                (
                    key.as_str(),
                    &*arena.alloc_str(&super::attrs::label_name(key)),
                )
            })
            .collect();
        Reader {
            b: ViewBuilder::new(cap, budget),
            arena,
            cfg,
            resource_label_names,
            point_of: Vec::new(),
            points: 0,
            refused_points: 0,
            resource_attrs: Vec::new(),
            resource_labels: Vec::new(),
            source: None,
            attrs: Vec::new(),
            labels: Vec::new(),
            counts: Vec::new(),
            bounds: Vec::new(),
            quantiles: Vec::new(),
            scratch_counts: Vec::new(),
            gathered: Vec::new(),
            scratch: String::new(),
            memo: TextMemo::default(),
            key_names: KeyNames::default(),
            start_ms: 0,
            ended: false,
        }
    }

    /// One `ResourceMetrics`: its resource first, then its metrics.
    fn resource_metrics(&mut self, rm: &'a [u8]) -> Result<(), ParseError> {
        self.resource_attrs.clear();
        fields(rm, |buf, tag, wire_type| match tag {
            1 => {
                let resource = wire::body(wire_type, buf)?;
                self.resource(resource)
                    .map_err(|e| e.at("ResourceMetrics", "resource"))
            }
            2 => wire::body(wire_type, buf).map(drop),
            3 => borrow_str(wire_type, buf)
                .map(drop)
                .map_err(|e| e.at("ResourceMetrics", "schema_url")),
            _ => skip(wire_type, tag, buf),
        })?;
        self.resource_labels();
        fields(rm, |buf, tag, wire_type| match tag {
            2 => {
                let sm = wire::body(wire_type, buf)?;
                self.scope_metrics(sm)
                    .map_err(|e| e.at("ResourceMetrics", "scope_metrics"))
            }
            _ => Ok(skip(wire_type, tag, buf)?),
        })
    }

    /// A `Resource`'s attributes, after those of any earlier `resource`
    /// field of the same `ResourceMetrics`.
    fn resource(&mut self, resource: &'a [u8]) -> Result<(), ViewError> {
        fields(resource, |buf, tag, wire_type| match tag {
            1 => {
                let kv = key_value(wire_type, buf).map_err(|e| e.at("Resource", "attributes"))?;
                self.resource_attrs.push(kv);
                Ok(())
            }
            2 => prim(
                uint32::merge(wire_type, &mut 0, buf, DecodeContext::default()),
                "Resource",
                "dropped_attributes_count",
            ),
            3 => wire::entity_ref(wire_type, buf),
            _ => skip(wire_type, tag, buf),
        })
    }

    /// The resource's source and the labels it gives its points, as the
    /// owned conversion makes them.
    fn resource_labels(&mut self) {
        let cfg = self.cfg;
        self.source = cfg
            .source_attributes
            .iter()
            .find_map(|key| self.first_present(key));
        self.resource_labels.clear();
        for i in 0..self.resource_label_names.len() {
            let (key, name) = self.resource_label_names[i];
            if let Some(value) = self.first_present(key) {
                self.resource_labels.push((name, value));
            }
        }
        if cfg.job_label {
            if let Some(name) = self.first_present("service.name") {
                let job = match self.first_present("service.namespace") {
                    Some(ns) => {
                        self.scratch.clear();
                        self.scratch.push_str(ns);
                        self.scratch.push('/');
                        self.scratch.push_str(name);
                        &*self.arena.alloc_str(&self.scratch)
                    }
                    None => name,
                };
                self.resource_labels.push(("job", job));
            }
        }
    }

    /// The text of the resource's first attribute named `key`, unless it
    /// is empty or has no value.
    fn first_present(&mut self, key: &str) -> Option<&'a str> {
        let (_, attr) = self.resource_attrs.iter().find(|(k, _)| *k == key)?;
        attr.clone()
            .text(self.arena, &mut self.scratch)
            .filter(|v| !v.is_empty())
    }

    fn scope_metrics(&mut self, sm: &'a [u8]) -> Result<(), ParseError> {
        fields(sm, |buf, tag, wire_type| match tag {
            1 => Ok(wire::scope(wire_type, buf)?),
            2 => {
                let m = wire::body(wire_type, buf)?;
                self.metric(m).map_err(|e| e.at("ScopeMetrics", "metrics"))
            }
            3 => Ok(borrow_str(wire_type, buf).map(drop)?),
            _ => Ok(skip(wire_type, tag, buf)?),
        })
    }

    /// One `Metric`: its name and type first, then its points.
    fn metric(&mut self, m: &'a [u8]) -> Result<(), ParseError> {
        let (name, variant, shape, data) = match self.fast_metric(m) {
            // The usual layout: its points are in `gathered`.
            Some((name, variant, shape)) => (name, variant, shape, None),
            None => {
                let (name, data) = metric_fields(m)?;
                let Some(data) = data else {
                    if self.source.is_none() {
                        self.missing_source(name, 0);
                    }
                    return Ok(());
                };
                let (shape, gathered) = self.shape(m, &data)?;
                (name, data.variant, shape, (!gathered).then_some(data))
            }
        };
        let names = map::Names::new(self.arena, name, variant, &mut self.scratch);
        let mut missing = 0u64;
        let in_data = |e: ParseError| e.at("Metric", variant.field());
        match data {
            None => {
                for i in 0..self.gathered.len() {
                    let point = self.gathered[i];
                    self.take_point(&names, variant, shape, point, &mut missing)
                        .map_err(in_data)?;
                }
            }
            Some(data) => data.bodies(m, |body| {
                fields(body, |buf, tag, wire_type| match tag {
                    1 => {
                        let point = wire::body(wire_type, buf)?;
                        self.take_point(&names, variant, shape, point, &mut missing)
                    }
                    _ => Ok(skip(wire_type, tag, buf)?),
                })
                .map_err(in_data)
            })?,
        }
        if self.source.is_none() {
            self.missing_source(name, missing);
        }
        Ok(())
    }

    /// Reads one data point of the metric's and makes its series; one of
    /// a resource without a source is only counted, in `missing`.
    fn take_point(
        &mut self,
        names: &map::Names<'a>,
        variant: Variant,
        shape: Shape,
        point: &'a [u8],
        missing: &mut u64,
    ) -> Result<(), ParseError> {
        let p = self.read_point(variant, point)?;
        if self.source.is_none() {
            *missing += 1;
            return Ok(());
        }
        self.point(names, variant, shape, &p)
    }

    /// What the metric's data says of all its points: a sum's temporality
    /// and monotonicity, a histogram's temporality (the last given of each
    /// in its fields, as prost merges them). Checks with prost the fields
    /// given for the oneof before its last member. When the data is one
    /// body, the walk also keeps where its points are (up to
    /// [`GATHERED_POINTS`]) in `gathered`, so that they are not looked for
    /// again; true when it kept them all.
    fn shape(&mut self, m: &'a [u8], data: &Data<'a>) -> Result<(Shape, bool), ViewError> {
        let (mut temporality, mut monotonic) = (0i32, false);
        let variant = data.variant;
        if variant == Variant::Gauge && !data.replaced {
            // A gauge has no shape, and nothing came before it to check:
            // the points' pass reads and checks the same fields.
            let shape = Shape {
                temporality,
                monotonic,
            };
            return Ok((shape, false));
        }
        self.gathered.clear();
        let mut gathered = data.only.is_some();
        if data.replaced {
            fields(&m[..data.from], |buf, tag, wire_type| {
                match Variant::of(tag) {
                    Some(v) => v.check_replaced(wire_type, buf),
                    None => skip(wire_type, tag, buf),
                }
            })?;
        }
        data.bodies(m, |body| {
            fields(body, |buf, tag, wire_type| {
                let ctx = DecodeContext::default();
                match (tag, variant) {
                    (2, Variant::Sum | Variant::Histogram | Variant::Exponential) => prim(
                        int32::merge(wire_type, &mut temporality, buf, ctx),
                        "Sum",
                        "aggregation_temporality",
                    ),
                    (3, Variant::Sum) => prim(
                        pbool::merge(wire_type, &mut monotonic, buf, ctx),
                        "Sum",
                        "is_monotonic",
                    ),
                    (1, _) => {
                        let point = wire::body(wire_type, buf)?;
                        gathered &= self.gathered.len() < GATHERED_POINTS;
                        if gathered {
                            self.gathered.push(point);
                        }
                        Ok(())
                    }
                    _ => skip(wire_type, tag, buf),
                }
            })
            .map_err(|e| e.at("Metric", variant.field()))
        })?;
        let shape = Shape {
            temporality,
            monotonic,
        };
        Ok((shape, gathered))
    }

    /// Counts and refuses the points of a metric whose resource names no
    /// source.
    fn missing_source(&mut self, name: &str, n: u64) {
        self.points += n as u32;
        self.refused_points += n;
        let keys = &self.cfg.source_attributes;
        self.b.refuse(n, RejectReason::MissingSource, || {
            format!(
                "metric {name:?}: its resource has none of the source attributes {} (otlp.source_attributes)",
                keys.join(", ")
            )
        });
    }

    /// Reads one data point of `variant`: its numbers into the returned
    /// [`Point`], its attributes, bucket counts, bounds and quantiles into
    /// the reader's buffers.
    fn read_point(&mut self, variant: Variant, point: &'a [u8]) -> Result<Point, ViewError> {
        self.attrs.clear();
        self.counts.clear();
        self.bounds.clear();
        self.quantiles.clear();
        if matches!(variant, Variant::Gauge | Variant::Sum) {
            if let Some(p) = self.fast_number_point(point) {
                return Ok(p);
            }
            self.attrs.clear();
        }
        self.exact_point(variant, point)
    }

    /// [`Reader::read_point`] for any layout, field by field as prost
    /// reads it (`self.attrs` and the arrays empty).
    fn exact_point(&mut self, variant: Variant, point: &'a [u8]) -> Result<Point, ViewError> {
        let mut p = Point::default();
        let (attributes, exemplars, flags) = match variant {
            Variant::Gauge | Variant::Sum => (7, 5, 8),
            Variant::Histogram => (9, 8, 10),
            Variant::Exponential => (1, 11, 10),
            Variant::Summary => (7, 0, 8),
        };
        fields(point, |buf, tag, wire_type| {
            let ctx = DecodeContext::default();
            let f64_field = |v: &mut f64, buf: &mut &[u8], field| {
                let ctx = DecodeContext::default();
                prim(double::merge(wire_type, v, buf, ctx), "DataPoint", field)
            };
            match tag {
                2 => prim(
                    fixed64::merge(wire_type, &mut p.start, buf, ctx),
                    "DataPoint",
                    "start_time_unix_nano",
                ),
                3 => prim(
                    fixed64::merge(wire_type, &mut p.time, buf, ctx),
                    "DataPoint",
                    "time_unix_nano",
                ),
                _ if tag == attributes => {
                    let kv =
                        key_value(wire_type, buf).map_err(|e| e.at("DataPoint", "attributes"))?;
                    self.attrs.push(kv);
                    Ok(())
                }
                _ if tag == exemplars => wire::exemplar(wire_type, buf),
                _ if tag == flags => prim(
                    uint32::merge(wire_type, &mut p.flags, buf, ctx),
                    "DataPoint",
                    "flags",
                ),
                4 if matches!(variant, Variant::Gauge | Variant::Sum) => {
                    let mut v = 0.0;
                    f64_field(&mut v, buf, "as_double")?;
                    p.value = Some(v);
                    Ok(())
                }
                6 if matches!(variant, Variant::Gauge | Variant::Sum) => {
                    let mut v = 0i64;
                    prim(
                        prost::encoding::sfixed64::merge(wire_type, &mut v, buf, ctx),
                        "NumberDataPoint",
                        "as_int",
                    )?;
                    p.value = Some(v as f64);
                    Ok(())
                }
                _ => self.distribution_field(variant, &mut p, tag, wire_type, buf),
            }
        })?;
        Ok(p)
    }

    /// A field of a histogram's, an exponential histogram's or a summary's
    /// point that the others do not have.
    fn distribution_field(
        &mut self,
        variant: Variant,
        p: &mut Point,
        tag: u32,
        wire_type: WireType,
        buf: &mut &'a [u8],
    ) -> Result<(), ViewError> {
        use Variant::{Exponential, Histogram, Summary};
        let ctx = DecodeContext::default;
        let f64_field = |v: &mut f64, buf: &mut &[u8], field| {
            prim(double::merge(wire_type, v, buf, ctx()), "DataPoint", field)
        };
        match (tag, variant) {
            (4, Histogram | Exponential | Summary) => prim(
                fixed64::merge(wire_type, &mut p.count, buf, ctx()),
                "DataPoint",
                "count",
            ),
            (5, Histogram | Exponential | Summary) => {
                f64_field(p.sum.get_or_insert(0.0), buf, "sum")
            }
            (6, Histogram) => prim(
                fixed64::merge_repeated(wire_type, &mut self.counts, buf, ctx()),
                "HistogramDataPoint",
                "bucket_counts",
            ),
            (7, Histogram) => prim(
                double::merge_repeated(wire_type, &mut self.bounds, buf, ctx()),
                "HistogramDataPoint",
                "explicit_bounds",
            ),
            // min, max (and an exponential histogram's zero threshold).
            (11 | 12, Histogram) | (12..=14, Exponential) => f64_field(&mut 0.0, buf, "min"),
            (6, Exponential) => prim(
                sint32::merge(wire_type, &mut 0, buf, ctx()),
                "ExponentialHistogramDataPoint",
                "scale",
            ),
            (7, Exponential) => prim(
                fixed64::merge(wire_type, &mut 0, buf, ctx()),
                "ExponentialHistogramDataPoint",
                "zero_count",
            ),
            (8 | 9, Exponential) => wire::buckets(wire_type, buf, &mut self.scratch_counts),
            (6, Summary) => {
                let q = wire::body(wire_type, buf)?;
                let (mut quantile, mut value) = (0.0, 0.0);
                fields(q, |buf, tag, wire_type| match tag {
                    1 => f64_field_of(wire_type, &mut quantile, buf, "quantile"),
                    2 => f64_field_of(wire_type, &mut value, buf, "value"),
                    _ => skip(wire_type, tag, buf),
                })?;
                self.quantiles.push((quantile, value));
                Ok(())
            }
            _ => skip(wire_type, tag, buf),
        }
    }
}

/// A `Metric`'s name and the data that counts, read field by field as
/// prost reads them.
fn metric_fields(m: &[u8]) -> Result<(&str, Option<Data<'_>>), ViewError> {
    let (mut name, mut data, mut end) = ("", None::<Data<'_>>, 0usize);
    fields(m, |buf, tag, wire_type| {
        // Where this field's key starts: where the one before ended.
        let start = end;
        let at = |field| move |e: ViewError| e.at("Metric", field);
        match (tag, Variant::of(tag)) {
            (1, _) => name = borrow_str(wire_type, buf).map_err(at("name"))?,
            (2, _) => drop(borrow_str(wire_type, buf).map_err(at("description"))?),
            (3, _) => drop(borrow_str(wire_type, buf).map_err(at("unit"))?),
            (12, _) => drop(key_value(wire_type, buf).map_err(at("metadata"))?),
            (_, Some(variant)) => {
                let body = wire::body(wire_type, buf)?;
                match &mut data {
                    Some(d) if d.variant == variant => d.only = None,
                    _ => {
                        data = Some(Data {
                            variant,
                            from: start,
                            replaced: data.is_some(),
                            only: Some(body),
                        })
                    }
                }
            }
            _ => skip(wire_type, tag, buf)?,
        }
        end = m.len() - buf.len();
        Ok::<(), ViewError>(())
    })?;
    Ok((name, data))
}

fn f64_field_of(
    wire_type: WireType,
    v: &mut f64,
    buf: &mut &[u8],
    field: &'static str,
) -> Result<(), ViewError> {
    prim(
        double::merge(wire_type, v, buf, DecodeContext::default()),
        "ValueAtQuantile",
        field,
    )
}

/// What a metric's data says of all its points.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    pub(super) temporality: i32,
    pub(super) monotonic: bool,
}

/// A data point's numbers (those that come one per point).
#[derive(Debug, Default)]
pub(super) struct Point {
    pub(super) start: u64,
    pub(super) time: u64,
    pub(super) flags: u32,
    /// A number point's value, if given.
    pub(super) value: Option<f64>,
    pub(super) count: u64,
    pub(super) sum: Option<f64>,
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
