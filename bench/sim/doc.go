// Package sim simulates a fleet of KV-cache publishers for load tests, demos and
// end-to-end checks of conductor (or of any indexer speaking the Mooncake
// indexer API).
//
// An Engine is one inference engine instance: per dp rank a real ZMQ PUB +
// ROUTER replay publisher (bench.Publisher) speaking one event dialect (vLLM
// array era, vLLM map era, SGLang, RFC #1527 standard), an LRU block pool per
// tier (device → host → disk, evictions offloaded down the chain the way an
// engine with KV offloading does), and optionally a Store: a Mooncake store
// master publishing a pool shared by every engine of a context (cpu_share).
// Engines publish the context's own block hashes, or (GroupConfig.EngineProfile,
// re-hash mode) their native vLLM / SGLang hashes into an xxh3 context, which
// the indexer re-hashes from token_ids. Ranks can reset their cache
// (AllBlocksCleared, EngineConfig.ClearEvery).
// Because the simulator emits every stored / removed event itself, it always
// knows the ground truth: which (instance, rank) holds which block on which
// tier. Expect turns that truth into the answer a tiered query must give
// (reference mooncake-conductor.md §6.3, four-tier cumulative rules), computed
// here independently of core's walk.
//
// A Cluster groups engines by context, routes a workload (a Mooncake-format
// trace expanded to tokens, or the built-in synthetic generator) across them
// with a Policy (random, round-robin, or cache-aware using the indexer's own
// answers), and quiesces: Quiesce publishes a sentinel block on every stream
// and waits until the indexer shows all of them, which proves every earlier
// event of that stream was applied (one stream is applied in order), so
// answers can then be compared with Expect exactly.
//
// Queries go through a Client (Mooncake JSON and msgpack here; the interface
// is what other surfaces plug into). Load runs closed or open loop with HDR
// latency histograms and, for a local server, the server's CPU time per
// request read from /proc/<pid>/stat.
//
// Concurrency: an Engine, a Store and a Cluster's routing are driven by one
// goroutine (the Cluster's driver); Clients are safe for concurrent use
// through one connection per goroutine (NewClient per worker).
package sim
