"""A third-party gRPC client for tallyd's tests: the stock Python `grpcio`,
as a user's tools would talk to the daemon.

  client.py ADDR list-v1alpha
      Lists the services through `grpc.reflection.v1alpha`, with the stock
      reflection client of `grpcio-reflection`; one name per line.
  client.py ADDR raw METHOD HEX
      Sends the bytes HEX as the request message of the unary METHOD
      (e.g. /tally.v1.Ingest/Push), unchecked, so a test can send what no
      generated client would (invalid UTF-8 in a string field).
  client.py ADDR raw-size METHOD BYTES
      Sends a message of BYTES zero bytes (an empty message padded with an
      unknown field) to METHOD.

`raw` and `raw-size` print `OK` or the status code's name and its details,
e.g. `RESOURCE_EXHAUSTED the message is larger than ...`.
"""

import sys

import grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

TIMEOUT_S = 20


def list_v1alpha(channel):
    database = ProtoReflectionDescriptorDatabase(channel)
    for name in database.get_services():
        print(name)


def call_raw(channel, method, payload):
    call = channel.unary_unary(
        method,
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    try:
        call(payload, timeout=TIMEOUT_S)
        print("OK")
    except grpc.RpcError as e:
        print(e.code().name, e.details())


def padded(size):
    # Field 15, wire type 2 (length-delimited): unknown to every tally.v1
    # message, so the message is valid whatever its length.
    n = max(size - 6, 0)
    varint = bytearray()
    v = n
    while v >= 0x80:
        varint.append((v & 0x7F) | 0x80)
        v >>= 7
    varint.append(v)
    return bytes([0x7A]) + bytes(varint) + bytes(n)


def main():
    addr, command = sys.argv[1], sys.argv[2]
    options = [
        ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ]
    with grpc.insecure_channel(addr, options=options) as channel:
        grpc.channel_ready_future(channel).result(timeout=TIMEOUT_S)
        if command == "list-v1alpha":
            list_v1alpha(channel)
        elif command == "raw":
            call_raw(channel, sys.argv[3], bytes.fromhex(sys.argv[4]))
        elif command == "raw-size":
            call_raw(channel, sys.argv[3], padded(int(sys.argv[4])))
        else:
            sys.exit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
