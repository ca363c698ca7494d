set(BRASS_TEST_DEPS brass_gguf nlohmann_json::nlohmann_json)
