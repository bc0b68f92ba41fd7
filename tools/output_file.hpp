// Files the command line writes (traces, sweep tables): never half a file, never a file it should
// not touch.
//
// The target must be absent, or a regular file when --force is given: a directory, a device such
// as /dev/null, a FIFO or a symbolic link is refused even with --force (renaming over it would
// replace the node itself, or write through the link to wherever it points). The text goes to a
// temporary file of a unique name beside the target (mkstemp: never a user's own FILE.tmp), every
// write and the final flush and close are checked, and only then is it renamed over the target;
// on any error, and on an exception thrown while writing, the temporary file is removed.
#pragma once

#include <string>

namespace smol::tools {

/// Refuses `path` for writing, naming `flag_name`: it exists without `force`, or exists and is
/// not a regular file. The empty path (no output asked for) passes.
void check_output_target(const std::string& path, bool force, const char* flag_name);

class OutputFile {
public:
    /// Checks the target (check_output_target), creates its folder, and a temporary file beside it.
    OutputFile(const std::string& path, bool force, const char* flag_name);
    ~OutputFile();   // removes the temporary file unless committed
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    /// The temporary file to write (closed: open it by name, write, close and check).
    const std::string& temp_path() const { return temp_; }
    /// Renames the finished temporary file over the target (checked again first: it may have
    /// appeared meanwhile). Call after the writer has closed the file and checked it.
    void commit();
    /// A bad_input error naming the flag and the file ("cannot write …: No space left on device").
    [[noreturn]] void fail_write(const std::string& what) const;

private:
    std::string path_, temp_;
    bool force_;
    const char* flag_;
    bool committed_ = false;
};

/// Writes `text` to `path` through an OutputFile.
void write_text_file(const std::string& path, const std::string& text, bool force, const char* flag_name);

}  // namespace smol::tools
