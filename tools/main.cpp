// wedge: the command line. Each sub-command lives in its own tools/cmd_*.cpp; this file
// only builds the root app and turns exceptions into one clear line and exit status 1.
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "engine/distributed.h"
#include "engine/nccl.h"
#include "engine/text_escape.h"
#include "kernels/tables.h"
#include "tools/commands.h"
#include "tools/training_support.h"

int main(int argc, char** argv) {
  // Under mpirun, standard output is rank 0's alone: it carries what scripts read (the
  // --json result line), and the launcher forwards every rank's streams in pieces of
  // whatever size it read, so a line from another rank could land inside it. Anything any
  // other rank writes there goes to its standard error instead.
  if (wedge::dist::launcher_rank() > 0) ::dup2(STDERR_FILENO, STDOUT_FILENO);
  CLI::App app{
      "wedge: a deep-learning engine written from scratch in C++ and CUDA.\n"
      "Trains TransformerLM, GrassmannLM and SheafStateLM language models, and sentence-pair\n"
      "classifiers on SNLI, without Python.\n"
      "Run `wedge <command> --help` for the flags of a command."};
  app.set_version_flag("--version", [] {
    // The version and what this build runs on: the CPU kernels picked for this CPU, CUDA,
    // and how several processes train together.
#ifdef WEDGE_HAVE_CUDA
    const char* cuda = "built in";
#else
    const char* cuda = "not built";
#endif
    const char* parallel = !wedge::dist::mpi_built()     ? "not built (one process)"
                           : wedge::dist::nccl_built() ? "MPI, with NCCL for GPU processes"
                                                       : "MPI (GPU processes through host memory)";
    return fmt::format("wedge {}\nCPU kernels: {}\nCUDA backend: {}\ndata parallel: {}", WEDGE_VERSION,
                       wedge::kernels::cpu_backend_name(), cuda, parallel);
  });
  app.require_subcommand(1);
  app.fallthrough();
  wedge::tools::register_ops_command(app);
  wedge::tools::register_data_commands(app);
  wedge::tools::register_model_commands(app);
  wedge::tools::register_train_commands(app);
  wedge::tools::register_generate_command(app);
  wedge::tools::register_bench_generate_command(app);
  wedge::tools::register_depsim_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help (and its kin) is not an error: CLI11 prints it. Every other flag problem is one
    // `error:` line and status 1, like any other failure.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fflush(stdout);
    const std::string command = app.get_subcommands().empty() ? "" : app.get_subcommands().front()->get_name() + " ";
    fmt::print(stderr, "error: {} (see `wedge {}--help`)\n", e.what(), command);
    return 1;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    fmt::print(stderr, "error: out of memory: the sizes asked for (model, --batch, --block, data) do not fit in this "
                       "machine's memory\n");
    return 1;
  } catch (const std::exception& e) {
    // A message may quote bytes of a damaged file (a JSON parser's "last read: ..."): the
    // terminal gets them escaped, never raw. Under mpirun every rank that fails says so;
    // the other ranks' lines name their rank. Exiting without finalising MPI makes the
    // launcher end the whole job rather than leave the other ranks waiting.
    std::fflush(stdout);
    const wedge::dist::Communicator* comm = wedge::dist::Communicator::started();
    const std::string rank = comm != nullptr && !comm->is_root() ? fmt::format("rank {}: ", comm->rank()) : "";
    fmt::print(stderr, "error: {}{}\n", rank, wedge::printable(e.what()));
    return 1;
  }
  wedge::dist::Communicator::finalize();
  // A training stopped by Ctrl-C has checkpointed and said so; the status tells scripts.
  return wedge::tools::interrupt_requested() ? wedge::tools::kInterruptedExitStatus : 0;
}
