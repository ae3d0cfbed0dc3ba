//! The codec of the hand-wired ingest routes (`ingest_wire`, `otlp_wire`):
//! it encodes responses with prost and hands each request over as the
//! bytes it came in (copied into one contiguous buffer, at most
//! `ingest.max_message_bytes`), so that the handler reads a view of them
//! instead of a decoded message owning every string.

use std::marker::PhantomData;

use bytes::{Buf, Bytes};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;

/// Responses `Resp` encoded by prost; requests taken as `Req`, their bytes.
pub(super) struct RawCodec<Resp, Req>(PhantomData<fn() -> (Resp, Req)>);

impl<Resp, Req> Default for RawCodec<Resp, Req> {
    fn default() -> Self {
        RawCodec(PhantomData)
    }
}

impl<Resp, Req> Codec for RawCodec<Resp, Req>
where
    Resp: prost::Message + Send + 'static,
    Req: From<Bytes> + Send + 'static,
{
    type Encode = Resp;
    type Decode = Req;
    type Encoder = tonic_prost::ProstEncoder<Resp>;
    type Decoder = RawDecoder<Req>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder(PhantomData)
    }
}

pub(super) struct RawDecoder<Req>(PhantomData<fn() -> Req>);

impl<Req: From<Bytes>> Decoder for RawDecoder<Req> {
    type Item = Req;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Req>, Status> {
        Ok(Some(Req::from(buf.copy_to_bytes(buf.remaining()))))
    }
}
