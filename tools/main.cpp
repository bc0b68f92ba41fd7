#include <iostream>

#include "tools/cli.hpp"

int main(int argc, char** argv) { return smol::tools::run_cli(argc, argv, std::cout, std::cerr); }
