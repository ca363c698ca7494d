# Turn a file into a C++ byte array: cmake -DIN=file -DOUT=file.cpp -DNAME=kIndexHtml -P embed.cmake
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n_hex)
math(EXPR n_bytes "${n_hex} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT} "// Generated from ${IN} by embed.cmake; do not edit.\n#include <cstddef>\nnamespace brass::server::webui {\nextern const unsigned char ${NAME}[] = {\n${bytes}0x00};\nextern const size_t ${NAME}Size = ${n_bytes};\n}  // namespace brass::server::webui\n")
