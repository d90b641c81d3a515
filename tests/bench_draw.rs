//! The benchmark's own node tests, run by the suite so that none is a test that nothing runs:
//! `bench/draw.test.mjs` (the SVG writer against a result shaped as `node bench/bench.mjs run` writes
//! it) and `bench/wasm.test.mjs` (the measuring tools' wasm-opt settings against
//! `scripts/build.sh`'s).

#[path = "javascript/node.rs"]
mod node;

#[test]
fn the_benchmark_draws_a_result_as_its_tests_expect() {
    node::node_tests_pass("bench/draw.test.mjs");
}

#[test]
fn the_measuring_tools_optimise_the_wasm_as_the_build_does() {
    node::node_tests_pass("bench/wasm.test.mjs");
}
