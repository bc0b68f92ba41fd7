// A std::ostream that writes a gzip file through zlib (--trace FILE.json.gz). The gzip header
// carries no file name and a zero time stamp (zlib's deflateInit2 with windowBits 15 + 16), so
// the same trace gives the same bytes.
#pragma once

#include <cstdio>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include <zlib.h>

namespace smol::tools {

class GzipFileBuf : public std::streambuf {
public:
    /// Opens `path` for writing; good() is false when it cannot be opened.
    explicit GzipFileBuf(const std::string& path, int level = 6);
    ~GzipFileBuf() override;
    GzipFileBuf(const GzipFileBuf&) = delete;
    GzipFileBuf& operator=(const GzipFileBuf&) = delete;

    bool good() const { return ok_; }
    /// Flushes the compressor and closes the file; false on any write error.
    bool close();

protected:
    int_type overflow(int_type c) override;
    std::streamsize xsputn(const char* s, std::streamsize n) override;

private:
    bool deflate_out(const char* data, std::size_t n, int flush);

    std::FILE* file_ = nullptr;
    z_stream z_{};
    std::vector<unsigned char> out_;
    bool ok_ = false, open_ = false;
};

}  // namespace smol::tools
