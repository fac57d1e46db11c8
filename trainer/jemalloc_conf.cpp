// jemalloc options, read by jemalloc at start-up through this well-known symbol (it is
// an unused global when the trainer is built without jemalloc).
//
// dirty_decay_ms/muzzy_decay_ms = -1: freed pages stay mapped for reuse instead of being
// returned to the OS. Every step allocates and frees the same large tensors (logits,
// attention scores); returning them made each step page-fault them in again: on the
// D512/L8 benchmark that cost 20 % of the step (MFU 69 % -> 89 %), with the same peak RSS.
//
// tcache_max:4096: the per-thread caches keep objects up to 4 KiB, not jemalloc 5.3's
// default 32 KiB. With pages never returned (above), caching the 4-32 KiB size classes
// let fragmentation grow without bound: the tiny model at tp 2 with the local-memory
// collectives (world 2, 2 cores, libjemalloc 5.3.0) grew from 446 to 606 MiB of RSS in
// 90 s, about 1.7 MiB/s, while the live heap stayed flat (jeprof: +1.3 MiB); with
// tcache_max:4096 (or tcache:false) it stays at 446 MiB. Fragmentation has other
// sources (HSDP in bf16 still grew 20 MiB/s), so the kept pages are also bounded at run
// time: KeptPagesBound (trainer/loop/step_log.h) returns them when they exceed what a step
// reuses. A finite dirty_decay_ms bounds them too, but 5000 ms cost 21 % of the D512/L8
// step here (6.56 -> 7.94 s, fp32, one thread).
extern "C" {
const char* malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1,tcache_max:4096";
}
