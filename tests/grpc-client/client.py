"""A gRPC client for tallyd built on Python grpcio, so the daemon's TLS and
bearer-token handling is exercised by an implementation that is not ours.

Usage: client.py SPEC.json

SPEC is a JSON object:
  target      "127.0.0.1:PORT"
  proto_dir   directory holding tally/v1/*.proto (stubs are generated from it)
  ca          PEM file of the CA to trust; absent or null: plain text
  cert, key   PEM client certificate and key (optional, TLS only)
  calls       list of {"method": "tally.v1.Ingest/Push", "token": "..." or null,
                       "request": {... the request message as proto3 JSON ...}}

Prints one JSON list: for each call {"code": "OK" | status name,
"details": str, "response": {...} or null}. Every call has a deadline, so the
script always finishes.
"""

import json
import sys
import tempfile

import grpc
from google.protobuf import json_format, message_factory
from grpc_tools import protoc

DEADLINE_S = 10


def generate(proto_dir, out_dir):
    files = ["tally/v1/ingest.proto", "tally/v1/query.proto"]
    status = protoc.main(
        ["protoc", f"-I{proto_dir}", f"--python_out={out_dir}"]
        + [f"{proto_dir}/{f}" for f in files]
    )
    if status != 0:
        raise SystemExit(f"protoc failed with {status}")
    sys.path.insert(0, out_dir)
    from tally.v1 import ingest_pb2, query_pb2  # noqa: E402

    return {"tally.v1": [ingest_pb2.DESCRIPTOR, query_pb2.DESCRIPTOR]}


def method_types(descriptors, method):
    service_name, rpc = method.split("/")
    package, service = service_name.rsplit(".", 1)
    for file in descriptors[package]:
        svc = file.services_by_name.get(service)
        if svc is not None:
            m = svc.methods_by_name[rpc]
            return (
                message_factory.GetMessageClass(m.input_type),
                message_factory.GetMessageClass(m.output_type),
            )
    raise SystemExit(f"no method {method}")


def channel(spec):
    if not spec.get("ca"):
        return grpc.insecure_channel(spec["target"]), False
    read = lambda key: open(spec[key], "rb").read() if spec.get(key) else None
    creds = grpc.ssl_channel_credentials(
        root_certificates=read("ca"),
        private_key=read("key"),
        certificate_chain=read("cert"),
    )
    return grpc.secure_channel(spec["target"], creds), True


def call(chan, secure, descriptors, c):
    request_type, response_type = method_types(descriptors, c["method"])
    stub = chan.unary_unary(
        "/" + c["method"],
        request_serializer=request_type.SerializeToString,
        response_deserializer=response_type.FromString,
    )
    request = json_format.ParseDict(c.get("request") or {}, request_type())
    kwargs = {"timeout": DEADLINE_S}
    token = c.get("token")
    if token is not None:
        if secure:
            # The way grpcio means bearer tokens to be sent: as call
            # credentials, which it only allows over TLS.
            kwargs["credentials"] = grpc.access_token_call_credentials(token)
        else:
            kwargs["metadata"] = [("authorization", f"Bearer {token}")]
    try:
        response = stub(request, **kwargs)
    except grpc.RpcError as e:
        return {"code": e.code().name, "details": e.details() or "", "response": None}
    return {
        "code": "OK",
        "details": "",
        "response": json_format.MessageToDict(
            response, preserving_proto_field_name=True
        ),
    }


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    with tempfile.TemporaryDirectory(prefix="tally-grpc-client-") as out:
        descriptors = generate(spec["proto_dir"], out)
        chan, secure = channel(spec)
        with chan:
            results = [call(chan, secure, descriptors, c) for c in spec["calls"]]
    json.dump(results, sys.stdout)
    print()


if __name__ == "__main__":
    main()
