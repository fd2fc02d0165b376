#!/usr/bin/env bash
# Resolves the pinned Apache Kafka release (broker, tools, Java client, MirrorMaker 2) from Maven Central
# into .cache/kafka-<version>/libs. The second run finds the cache and does nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$root/testenv/kafka/pom.xml")
libs="$root/.cache/kafka-$version/libs"
if [ -f "$libs/kafka_2.13-$version.jar" ] && [ -f "$libs/kafka-clients-$version.jar" ] && [ -f "$libs/connect-mirror-$version.jar" ]; then
  exit 0
fi
echo "fetching Apache Kafka $version from Maven Central into $libs" >&2
tmp="$libs.tmp"
rm -rf "$tmp"
mvn -q -B -f "$root/testenv/kafka/pom.xml" dependency:copy-dependencies \
  -DoutputDirectory="$tmp" -DincludeScope=runtime
rm -rf "$libs"
mv "$tmp" "$libs"
