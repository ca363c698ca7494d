# The CLI tests spawn ${BRASS_BINARY_DIR}/brass on the built-in model: build both first.
set(BRASS_TEST_DEPS nlohmann_json::nlohmann_json)
if(TARGET brass_builtin_model)
  cmake_language(DEFER CALL add_dependencies cli_tests brass brass_builtin_model)
endif()
