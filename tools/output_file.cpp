#include "tools/output_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"

namespace smol::tools {

namespace fs = std::filesystem;

namespace {

ErrorContext at_flag(const char* name) { return {"", "", name}; }

const char* kind_of(fs::file_type t) {
    switch (t) {
        case fs::file_type::directory: return "a directory";
        case fs::file_type::symlink: return "a symbolic link";
        case fs::file_type::character: return "a character device";
        case fs::file_type::block: return "a block device";
        case fs::file_type::fifo: return "a FIFO (named pipe)";
        case fs::file_type::socket: return "a socket";
        default: return "not a regular file";
    }
}

}  // namespace

void check_output_target(const std::string& path, bool force, const char* flag_name) {
    if (path.empty()) return;
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(path, ec);
    if (ec && ec != std::errc::no_such_file_or_directory)
        fail_input("cannot inspect " + path + ": " + ec.message(), at_flag(flag_name));
    if (!fs::exists(st)) return;
    if (st.type() != fs::file_type::regular)
        fail_input(path + " is " + kind_of(st.type()) + "; the output must be a new file or a regular file to overwrite" +
                       (force ? " (--force overwrites regular files only)" : ""),
                   at_flag(flag_name));
    if (!force) fail_input(path + " exists; pass --force to overwrite it", at_flag(flag_name));
}

OutputFile::OutputFile(const std::string& path, bool force, const char* flag_name)
    : path_(path), force_(force), flag_(flag_name) {
    check_output_target(path_, force_, flag_);
    const fs::path target(path_);
    std::error_code ec;
    if (target.has_parent_path()) {
        fs::create_directories(target.parent_path(), ec);
        if (ec) fail_input("cannot create the folder " + target.parent_path().string() + ": " + ec.message(), at_flag(flag_));
    }
    // ".NAME.XXXXXX.tmp" beside the target: the same file system, so the rename is atomic, and a
    // name no user file has.
    const fs::path pattern = target.parent_path() / ("." + target.filename().string() + ".XXXXXX.tmp");
    std::string name = pattern.string();
    std::vector<char> buf(name.begin(), name.end());
    buf.push_back('\0');
    const int fd = mkstemps(buf.data(), 4);
    if (fd < 0) fail_input("cannot create a file beside " + path_ + ": " + std::strerror(errno), at_flag(flag_));
    temp_ = buf.data();
    // mkstemp creates the file for its owner only; give it the permissions a new file would get.
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    close(fd);
}

OutputFile::~OutputFile() {
    if (!committed_ && !temp_.empty()) std::remove(temp_.c_str());
}

void OutputFile::fail_write(const std::string& what) const {
    fail_input("cannot write " + path_ + ": " + what, at_flag(flag_));
}

void OutputFile::commit() {
    // The target may have been created while we wrote; the same rules apply to it.
    check_output_target(path_, force_, flag_);
    std::error_code ec;
    fs::rename(temp_, path_, ec);
    if (ec) fail_write(ec.message());
    committed_ = true;
}

void write_text_file(const std::string& path, const std::string& text, bool force, const char* flag_name) {
    OutputFile out(path, force, flag_name);
    std::FILE* f = std::fopen(out.temp_path().c_str(), "wb");
    if (!f) out.fail_write(std::strerror(errno));
    const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const int saved = errno;
    // fclose flushes: its result is the final flush's.
    if (std::fclose(f) != 0 || !wrote) out.fail_write(std::strerror(wrote ? errno : saved));
    out.commit();
}

}  // namespace smol::tools
