//! The benchmark's own node tests, run by the suite so that none is a test that nothing runs:
//! `bench/draw.test.mjs` (the SVG writer against a result shaped as `node bench/bench.mjs run` writes
//! it), `bench/wasm.test.mjs` (the measuring tools' wasm-opt settings against
//! `scripts/build.sh`'s), `bench/cost.test.mjs` (the cost script's arithmetic at list prices)
//! `bench/bench.test.mjs` (the one benchmark command's sub-commands), `bench/summary.test.mjs`
//! (the README's performance lines are the committed summary's, as the summary command renders it)
//! and `bench/targets.test.mjs` (the full run's targets table: met exactly when within its goal).

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

#[test]
fn the_cost_script_prices_a_million_payments_as_its_tests_work_out() {
    node::node_tests_pass("bench/cost.test.mjs");
}

#[test]
fn the_one_benchmark_command_finds_every_sub_command() {
    node::node_tests_pass("bench/bench.test.mjs");
}

#[test]
fn the_readmes_performance_figures_are_the_summary_commands() {
    node::node_tests_pass("bench/summary.test.mjs");
}

#[test]
fn the_full_runs_targets_are_met_exactly_when_within_their_goals() {
    node::node_tests_pass("bench/targets.test.mjs");
}
