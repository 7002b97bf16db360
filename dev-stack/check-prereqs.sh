#!/usr/bin/env bash
# Checks (and, as root on Debian, installs) what the local stack needs besides Python packages:
# Maven to fetch artifacts by name from Maven Central, Java 17+ for Kafka and Spark, and
# Java 21+ for Apicurio Registry 3.3. Everything else is downloaded by the project itself.
set -euo pipefail

missing=()
command -v python3 >/dev/null || missing+=(python3)
command -v mvn >/dev/null || missing+=(maven)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
# The install compiles pgbridge's C accelerator (bridge/native), which the test suite checks
# is built. (A plain `pip install` without a compiler still works, on the pure-Python path.)
command -v cc >/dev/null || command -v gcc >/dev/null || missing+=(gcc)

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing: ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  else
    echo "missing: ${missing[*]} - install them (Debian: apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

python3 - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"pgbridge needs Python 3.11 or newer, found {sys.version.split()[0]}")
PY

# Apicurio Registry 3.3 runs on Java 21+; the stack finds one via PGBRIDGE_JAVA_HOME, JAVA_HOME,
# PATH or /usr/lib/jvm (bridge/devstack/service.py: find_java).
found=""
for java in ${PGBRIDGE_JAVA_HOME:+$PGBRIDGE_JAVA_HOME/bin/java} ${JAVA_HOME:+$JAVA_HOME/bin/java} java /usr/lib/jvm/*/bin/java; do
  v=$("$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1) || continue
  if [ -n "$v" ] && [ "$v" -ge 21 ]; then found="$java ($v)"; break; fi
done
if [ -z "$found" ]; then
  echo "Apicurio Registry needs Java 21 or newer; none found. Install one (for example a" >&2
  echo "Temurin 21 JDK) and set PGBRIDGE_JAVA_HOME to it." >&2
  exit 1
fi
