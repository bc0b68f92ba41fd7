#include "tools/gzip_stream.hpp"

#include <algorithm>

namespace smol::tools {

GzipFileBuf::GzipFileBuf(const std::string& path, int level) : out_(1 << 16) {
    file_ = std::fopen(path.c_str(), "wb");
    if (!file_) return;
    // windowBits 15 + 16: a gzip wrapper with a default header (no name, mtime 0).
    if (deflateInit2(&z_, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return;
    open_ = ok_ = true;
}

GzipFileBuf::~GzipFileBuf() { close(); }

bool GzipFileBuf::deflate_out(const char* data, std::size_t n, int flush) {
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    z_.avail_in = static_cast<uInt>(n);
    for (;;) {
        z_.next_out = out_.data();
        z_.avail_out = static_cast<uInt>(out_.size());
        const int rc = deflate(&z_, flush);
        if (rc == Z_STREAM_ERROR) return ok_ = false;
        const std::size_t have = out_.size() - z_.avail_out;
        if (have && std::fwrite(out_.data(), 1, have, file_) != have) return ok_ = false;
        // Done when the input is consumed and, when finishing, the stream is closed.
        if (flush == Z_FINISH ? rc == Z_STREAM_END : z_.avail_out != 0) return ok_;
    }
}

GzipFileBuf::int_type GzipFileBuf::overflow(int_type c) {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
}

std::streamsize GzipFileBuf::xsputn(const char* s, std::streamsize n) {
    if (!ok_) return 0;
    // zlib takes at most 4 GiB per call (uInt avail_in).
    for (std::streamsize done = 0; done < n;) {
        const std::size_t part = static_cast<std::size_t>(std::min<std::streamsize>(n - done, 1 << 30));
        if (!deflate_out(s + done, part, Z_NO_FLUSH)) return done;
        done += static_cast<std::streamsize>(part);
    }
    return n;
}

bool GzipFileBuf::close() {
    if (!open_) {
        if (file_) std::fclose(file_);
        file_ = nullptr;
        return false;
    }
    open_ = false;
    deflate_out(nullptr, 0, Z_FINISH);
    deflateEnd(&z_);
    if (std::fclose(file_) != 0) ok_ = false;
    file_ = nullptr;
    return ok_;
}

}  // namespace smol::tools
