# Sourced by the fetch scripts: cache_dir NAME SUB [DIR] prints where tokenizer files go -- DIR
# when given, else ${XDG_CACHE_HOME:-$HOME/.cache}/tptrain/SUB (XDG_CACHE_HOME only when
# absolute, as the XDG spec says), the folder text/cache_dir.cpp reads them from -- or says
# why there is none (NAME: the script, for the message) and returns 1.
cache_dir() {
  local name=$1 sub=$2
  if [ $# -gt 2 ]; then
    echo "$3"
  elif [ -n "${XDG_CACHE_HOME:-}" ] && [ "${XDG_CACHE_HOME#/}" != "$XDG_CACHE_HOME" ]; then
    echo "$XDG_CACHE_HOME/tptrain/$sub"
  elif [ -n "${HOME:-}" ]; then
    echo "$HOME/.cache/tptrain/$sub"
  else
    echo "$name: neither XDG_CACHE_HOME nor HOME is set: name the folder (jobs/$name.sh DIR)" >&2
    return 1
  fi
}
