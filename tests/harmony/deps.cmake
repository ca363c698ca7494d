# harmony tests: the real tokenizer's token-level checks (tokens_test.cpp) compile only
# when brass_tokenizer exists; everything else uses the test tokenizers in test_tokenizer.h.
set(BRASS_TEST_DEPS)
if(TARGET brass_tokenizer)
  list(APPEND BRASS_TEST_DEPS brass_tokenizer)
  set_property(SOURCE ${CMAKE_CURRENT_LIST_DIR}/tokens_test.cpp APPEND PROPERTY
               COMPILE_DEFINITIONS BRASS_HARMONY_HAVE_TOKENIZER=1)
endif()
