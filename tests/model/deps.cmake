set(BRASS_TEST_DEPS brass_gguf brass_quant nlohmann_json::nlohmann_json)
