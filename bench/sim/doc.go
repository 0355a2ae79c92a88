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
// A Group holds the engines of one context, routes a workload (a Mooncake-format
// trace expanded to tokens, or the built-in synthetic generator) across them
// with a Policy (random, round-robin, or cache-aware using the indexer's own
// answers), and quiesces: Quiesce publishes a sentinel block on every stream
// and waits until the indexer shows all of them, which proves every earlier
// event of that stream was applied (one stream is applied in order), so
// answers can then be compared with Expect exactly.
//
// Queries go through a Client (the Mooncake msgpack and JSON dialects, the
// Python client's RPC surface, Dynamo's /query; the interface is what other
// surfaces plug into). The query load runs on bench.RunLoad, closed or open
// loop with HDR latency percentiles, each worker with a Client of its own;
// for a local server Run reads the server's CPU time per phase from
// /proc/<pid>/stat (bench.ProcCPU).
//
// Concurrency: an Engine, a Store and a Group's routing are driven by one
// goroutine (the Group's driver); a Client is used by one goroutine
// (a ClientFactory makes one per worker, each with its own connection).
package sim
