// The entry points of executor.hpp in a build without MPI or BLAS: each says so (exit 2).
#include "core/error.hpp"
#include "exec/calibrate.hpp"
#include "exec/executor.hpp"

namespace smol::exec {

class Mpi {};

namespace {
[[noreturn]] void unavailable(const char* what) {
    fail_input(std::string("smolcluster was built without MPI and BLAS, so '") + what +
               "' cannot run here: install libopenmpi-dev openmpi-bin libopenblas-dev (make deps does) and "
               "rebuild (CMake found no MPI or no OpenBLAS when it configured)");
}
}  // namespace

bool available() { return false; }
void require_available(const char* command) { unavailable(command); }
Session::Session() { unavailable("mpi"); }
Session::~Session() = default;
int Session::rank() const { unavailable("mpi"); }
int Session::size() const { unavailable("mpi"); }
int Session::local_size() const { unavailable("mpi"); }
Mpi& Session::mpi() { unavailable("mpi"); }
void Session::leave_with_error(int, Time) { unavailable("mpi"); }
void check_same_graph(Session&, const OpGraph&) { unavailable("run"); }
std::vector<std::string> all_gather_text(Session&, const std::string&) { unavailable("mpi"); }
Bytes cpu_workspace(const OpGraph&, int) { unavailable("run"); }
HostMemory host_memory(Session&, Bytes) { unavailable("run"); }
Measured run_cpu(Session&, const OpGraph&, const topo::Cluster&, const ExecOptions&) { unavailable("run"); }
topo::Profile calibrate(Session&, const CalibrateOptions&, std::ostream&) { unavailable("calibrate"); }
bool cuda_built() { return false; }
Bytes cuda_workspace(const OpGraph&, int) { unavailable("run"); }
GpuMemory gpu_memory(Session&, Bytes) { unavailable("run"); }
Measured run_cuda(Session&, const OpGraph&, const topo::Cluster&, const ExecOptions&) { unavailable("run"); }

}  // namespace smol::exec
