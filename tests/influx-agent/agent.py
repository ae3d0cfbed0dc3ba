"""Writes points to Tally with InfluxData's official Python client
(influxdb-client, the InfluxDB v2 API: POST /api/v2/write), and prints as
JSON every numeric field it wrote, for the test to compute what Tally must
hold.

    agent.py URL TOKEN HOST START_MS

Three writes of the synchronous write API: Point objects at millisecond
precision (gzip on), a line-protocol string at second precision, and a
dictionary record at microsecond precision. Each write either succeeds or
raises, which fails the run.
"""

import json
import sys

from influxdb_client import InfluxDBClient, Point, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS


def main():
    url, token, host, start_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    written = []

    def wrote(measurement, field, tags, ts_ms, value):
        written.append(
            {"metric": f"{measurement}_{field}", "labels": tags, "ts_ms": ts_ms, "value": value}
        )

    with InfluxDBClient(url=url, token=token, org="tally", enable_gzip=True, timeout=20_000) as client:
        write = client.write_api(write_options=SYNCHRONOUS)

        points = []
        for i in range(30):
            ts = start_ms + i * 7_000
            room = "kitchen" if i % 2 else "hall"
            temp = 20.0 + (i * 37 % 11) / 4
            count = i * 3 - 20
            p = (
                Point("sensor")
                .tag("host", host)
                .tag("room", room)
                .field("temperature", temp)
                .field("count", count)
                .field("ok", i % 3 == 0)
                .field("note", f"reading {i}")
                .time(ts, WritePrecision.MS)
            )
            points.append(p)
            wrote("sensor", "temperature", {"room": room}, ts, temp)
            wrote("sensor", "count", {"room": room}, ts, float(count))
            wrote("sensor", "ok", {"room": room}, ts, 1.0 if i % 3 == 0 else 0.0)
        write.write(bucket="agents", record=points, write_precision=WritePrecision.MS)

        lines = []
        for i in range(12):
            ts_s = start_ms // 1000 + 5 + i * 13
            v = 100 - i * 2.5
            lines.append(f"disk,host={host},device=sda free_pct={v} {ts_s}")
            wrote("disk", "free_pct", {"device": "sda"}, ts_s * 1000, v)
        write.write(bucket="agents", record="\n".join(lines), write_precision=WritePrecision.S)

        records = []
        for i in range(8):
            ts_us = (start_ms + 3_000 + i * 11_000) * 1000 + 999
            v = i * 1.25
            records.append(
                {"measurement": "net", "tags": {"host": host, "iface": "eth0"},
                 "fields": {"rx_rate": v}, "time": ts_us}
            )
            wrote("net", "rx_rate", {"iface": "eth0"}, ts_us // 1000, v)
        write.write(bucket="agents", record=records, write_precision=WritePrecision.US)

    print(json.dumps({"written": written}))


if __name__ == "__main__":
    main()
