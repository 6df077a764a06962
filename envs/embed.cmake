# SPDX-License-Identifier: Apache-2.0
# cmake -DIN=file -DOUT=file.c -P embed.cmake: writes IN's bytes as the C string
# env__gym_bridge_src (a byte array with a final NUL, so no escaping can go wrong).
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from envs/gym_bridge.py by envs/embed.cmake. */\nconst char env__gym_bridge_src[] = {\n${bytes}0x00};\n")
