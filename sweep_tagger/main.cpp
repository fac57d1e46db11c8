// sweep_tagger: run-directory tags, sweep expansion and aggregation.
// Usage: sweep_tagger {tag|expand|aggregate} --help
#include <iostream>

#include "sweep_tagger/cli.h"

int main(int argc, char** argv) { return ftb::runSweepTagger(argc, argv, std::cout, std::cerr); }
