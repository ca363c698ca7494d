set(BRASS_TEST_DEPS nlohmann_json::nlohmann_json)
