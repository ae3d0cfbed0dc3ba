//! A real Prometheus remote-writing to Tally (see the module docs).
