# server tests: the real o200k tokenizer (rank file from node_modules) for token-level checks.
set(BRASS_TEST_DEPS brass_tokenizer brass_harmony)
