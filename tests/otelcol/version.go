package main

// version is the Collector release every module in go.mod is pinned to.
const version = "0.165.0"
