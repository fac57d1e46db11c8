// sweep_tagger: run-directory tags, sweep expansion and aggregation.
// Usage: sweep_tagger {tag|expand|aggregate} --help
#include <iostream>
#include <new>

#include "common/out_of_memory.h"
#include "sweep_tagger/cli.h"

int main(int argc, char** argv) {
  try {
    return ftb::runSweepTagger(argc, argv, std::cout, std::cerr);
  } catch (const std::bad_alloc& e) {  // `expand --memory-budget` of a huge config, say
    return ftb::exitOutOfMemory("sweep_tagger", e);
  }
}
