# Training on a set of shards (docs/design.md, "Datasets"): the same token stream tokenized into
# one shard and into many gives the same losses, step for step, training and evaluation, on
# 2 data-parallel ranks; the glob and folder forms of data.train work; a token outside the
# vocabulary in a large set is one agreed error; a folder that holds
# tokenize's train and valid shards together, and a pattern matching nothing, are refused by key.
#   cmake -DEXE=tptrain "-DMPI2=mpiexec;-n;2;flags..." -DDATA=tests/data -DDIR=work -P shard_set_train.cmake
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})

include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)

# Byte tokens: no vocabulary files needed. 376 bytes: 100 for validation, the rest training.
foreach(kind one many)
  if(kind STREQUAL "one")
    set(cut 1000000)
  else()
    set(cut 37)  # train_000000 .. train_000007, valid_000000 .. valid_000002
  endif()
  run(ok ${EXE} tokenize ${DATA}/cli/corpus.txt --tokenizer bytes --out ${DIR}/${kind}
      --shard-tokens ${cut} --valid-tokens 100)
endforeach()
# The header records the vocabulary: header[3] = 256 tokens, header[4] = 1 (bytes).
file(READ ${DIR}/many/train_000000.bin header LIMIT 20 HEX)
if(NOT header STREQUAL "88d8340101000000250000000001000001000000")
  message(FATAL_ERROR "train_000000.bin starts ${header}: expected magic, version 1, 37 tokens, 256, 1")
endif()
file(GLOB many_train ${DIR}/many/train_*.bin)
list(LENGTH many_train n)
if(n LESS 5)
  message(FATAL_ERROR "expected many training shards, got ${n}")
endif()

set(sets --set parallel.tensor=1 --set parallel.data=2 --set training.log_interval=1
         --set training.eval_interval=2 --set training.eval_windows=4 --set checkpoint.resume=false)
set(losses "")
foreach(form one many many_folder)
  if(form STREQUAL "one")
    set(train ${DIR}/one/train_000000.bin)
    set(valid ${DIR}/one/valid_000000.bin)
  elseif(form STREQUAL "many")
    set(train ${DIR}/many/train_*.bin)
    set(valid ${DIR}/many/valid_*.bin)
  else()
    file(MAKE_DIRECTORY ${DIR}/folder)
    file(COPY ${many_train} DESTINATION ${DIR}/folder)
    set(train ${DIR}/folder)
    set(valid ${DIR}/many/valid_*.bin)
  endif()
  run(ok ${MPI2} ${EXE} train ${DATA}/cli/valid.toml ${sets} --set data.train=${train} --set data.valid=${valid}
      --set run.dir=${DIR}/run_${form} --set checkpoint.dir=${DIR}/run_${form}/ck)
  if(output MATCHES "were tokenized with")
    message(FATAL_ERROR "${form}: a tokenizer warning for shards of the deck's own tokenizer")
  endif()
  string(REGEX MATCHALL "(eval )?loss [0-9.]+" found "${output}")
  list(LENGTH found n)
  if(n LESS 6)
    message(FATAL_ERROR "${form}: expected 4 training and 2 evaluation losses, found [${found}]")
  endif()
  if(losses STREQUAL "")
    set(losses "${found}")
  elseif(NOT found STREQUAL losses)
    message(FATAL_ERROR "${form}: losses [${found}] differ from one shard's [${losses}]")
  endif()
endforeach()

run(fail ${EXE} train ${DATA}/cli/valid.toml ${sets} --set parallel.data=1 --set data.train=${DIR}/many
    --set run.dir=${DIR}/run_bad)
if(NOT output MATCHES "data\\.train = .*many.* is a folder holding both train_\\*\\.bin and valid_\\*\\.bin")
  message(FATAL_ERROR "a folder of train and valid shards: no message naming data.train")
endif()
run(fail ${EXE} train ${DATA}/cli/valid.toml ${sets} --set parallel.data=1 --set data.train=${DIR}/many/trian_*.bin
    --set run.dir=${DIR}/run_bad)
if(NOT output MATCHES "data\\.train = .*trian_\\*\\.bin.* is a pattern that matches no file")
  message(FATAL_ERROR "a pattern matching nothing: no message naming data.train and the pattern")
endif()

# Shards that record another tokenizer than data.tokenizer: training goes on (it reads no
# tokenizer), with a warning naming the key, the shards' tokenizer and the deck's.
run(ok ${EXE} train ${DATA}/cli/valid.toml ${sets} --set parallel.data=1 --set data.train=${DIR}/folder
    --set data.valid= --set data.tokenizer=gpt2 --set model.vocab_size=50257 --set training.steps=1
    --set optimizer.warmup_steps=0 --set run.dir=${DIR}/run_other_tokenizer)
if(NOT output MATCHES "data\\.train = [^\n]*folder: its shards were tokenized with bytes, 256 tokens, but data\\.tokenizer = \"gpt2\"")
  message(FATAL_ERROR "byte shards under data.tokenizer = gpt2: no warning naming data.train and both tokenizers")
endif()

# eval warns as train does (issue 30: it printed a loss without a word), and reads only the data it
# evaluates: --data, or data.valid; generate reads none. A data.train that does not exist here
# (a cluster path) is not looked at.
set(nowhere --set data.train=${DIR}/nowhere/train.bin)
run(ok ${EXE} eval ${DATA}/cli/valid.toml ${sets} --set parallel.data=1 --set data.tokenizer=gpt2
    --set model.vocab_size=50257 --checkpoint ${DIR}/run_other_tokenizer/checkpoints/step_00000001.h5
    --data ${DIR}/folder --windows 2 ${nowhere} --set data.valid=${DIR}/nowhere/valid.bin)
if(NOT output MATCHES "--data = [^\n]*folder: its shards were tokenized with bytes, 256 tokens, but data\\.tokenizer = \"gpt2\"")
  message(FATAL_ERROR "eval --data of byte shards under data.tokenizer = gpt2: no warning")
endif()
run(ok ${EXE} eval ${DATA}/cli/valid.toml ${sets} --set parallel.data=1 --checkpoint ${DIR}/run_one/ck/step_00000004.h5
    --windows 2 ${nowhere} --set data.valid=${DIR}/one/valid_000000.bin)
run(ok ${EXE} generate ${DATA}/cli/valid.toml ${sets} --set parallel.data=1 --checkpoint ${DIR}/run_one/ck/step_00000004.h5
    --prompt x --tokens 2 ${nowhere} --set data.valid=${DIR}/nowhere/valid.bin)
run(fail ${EXE} eval ${DATA}/cli/valid.toml ${sets} --set parallel.data=1 --checkpoint ${DIR}/run_one/ck/step_00000004.h5
    --windows 2 --set data.valid=${DIR}/nowhere/valid.bin)
if(NOT output MATCHES "data\\.valid = [^\n]*nowhere/valid\\.bin")
  message(FATAL_ERROR "eval on a data.valid that does not exist: no message naming data.valid")
endif()

# A token outside the vocabulary in a dataset too large to check at open (over 64 MiB): found by
# the step's check on every rank and reported once, agreed (not a rank aborting the job alone);
# in the validation set, when the run is built. Letters A..J are tokens 65..74 < vocab_size 100.
string(REPEAT "x" 1048576 mib)
file(WRITE ${DIR}/big/train.txt "")
foreach(i RANGE 1 70)
  file(APPEND ${DIR}/big/train.txt "${mib}")
endforeach()
string(REPEAT "ABCDEFGHIJ" 100 letters)
file(WRITE ${DIR}/small.txt "${letters}")
foreach(key train valid)
  if(key STREQUAL "train")
    set(data --set data.train=${DIR}/big/train.txt --set data.valid=${DIR}/small.txt)
  else()
    set(data --set data.train=${DIR}/small.txt --set data.valid=${DIR}/big/train.txt)
  endif()
  run(fail ${MPI2} ${EXE} train ${DATA}/cli/valid.toml ${sets} --set model.vocab_size=100 ${data}
      --set run.dir=${DIR}/run_big_${key})
  string(REGEX MATCHALL "tptrain: error" errors "${output}")
  list(LENGTH errors n)
  if(NOT output MATCHES "train[.]txt': token 120 at index [0-9]+ is >= vocab_size 100" OR NOT n EQUAL 1
     OR output MATCHES "MPI_ABORT was invoked")
    message(FATAL_ERROR "data.${key}: a token >= vocab_size in a large set is not one agreed error")
  endif()
endforeach()
file(REMOVE_RECURSE ${DIR})
