#!/usr/bin/env bash
# A Java 21 for the tests to run Spark on, on a Debian bookworm machine that has only Java 17.
#
# Bookworm has no OpenJDK 21 package. Trixie's (openjdk-21-jre-headless) needs glibc 2.38, newer
# than bookworm's 2.36, so it is unpacked under .cache/java21 together with trixie's own glibc,
# libstdc++, libgcc and zlib, and its executables are pointed at that glibc (patchelf: interpreter
# and RPATH). Nothing is installed system-wide and the machine's apt sources are not changed (apt
# runs with a private source list). The JVM is Debian's unmodified OpenJDK 21 build, with every
# module (jdk.incubator.vector among them, which Spark 4.1's launcher requires on 17 and 21).
#
#   scripts/java21.sh            -> prints the JAVA_HOME to use (.cache/java21/jdk)
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "java21: error: $*" >&2; exit 1; }

DEST=$PWD/.cache/java21
JAVA_HOME21=$DEST/jdk
if [ -x "$JAVA_HOME21/bin/java" ] && "$JAVA_HOME21/bin/java" -version 2>&1 | grep -q 'version "21\.'; then
  echo "$JAVA_HOME21"
  exit 0
fi
command -v apt-get >/dev/null 2>&1 || die "apt-get not found; set JAVA_HOME to a JDK 21 instead"
command -v dpkg >/dev/null 2>&1 || die "dpkg not found; set JAVA_HOME to a JDK 21 instead"
command -v patchelf >/dev/null 2>&1 || die "patchelf not found; install Debian's patchelf package"

rm -rf "$DEST"
mkdir -p "$DEST/apt/lists/partial" "$DEST/debs"
echo "deb http://deb.debian.org/debian trixie main" > "$DEST/apt/sources.list"
APT=(-o "Dir::Etc::sourcelist=$DEST/apt/sources.list" -o Dir::Etc::sourceparts=/dev/null
     -o "Dir::State::lists=$DEST/apt/lists" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
echo "java21: fetching Debian trixie's openjdk-21-jre-headless and its glibc into $DEST" >&2
apt-get -q "${APT[@]}" update >/dev/null || die "apt-get update of Debian trixie's index failed"
(cd "$DEST/debs" && apt-get -q "${APT[@]}" download openjdk-21-jre-headless libc6 libstdc++6 libgcc-s1 zlib1g >/dev/null) \
  || die "apt-get download of openjdk-21-jre-headless failed"
for deb in "$DEST"/debs/*.deb; do dpkg -x "$deb" "$DEST/root"; done

LIBS=$DEST/root/usr/lib/x86_64-linux-gnu
JDK=$DEST/root/usr/lib/jvm/java-21-openjdk-amd64
# conf/ links into /etc/java-21-openjdk, which this machine does not have: the unpacked copies.
find "$JDK" -type l -lname '/etc/java-21-openjdk/*' | while read -r link; do
  target=$(readlink "$link")
  rm "$link"
  cp -a "$DEST/root$target" "$link"
done
rpath="$LIBS:$JDK/lib:$JDK/lib/server"
for exe in "$JDK"/bin/* "$JDK/lib/jspawnhelper" "$JDK/lib/jexec"; do
  [ -f "$exe" ] || continue
  patchelf --set-interpreter "$LIBS/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$rpath" "$exe"
done
find "$JDK/lib" -name '*.so' -type f -exec patchelf --force-rpath --set-rpath "$rpath" {} \;
ln -sfn "$JDK" "$JAVA_HOME21"
rm -rf "$DEST/apt" "$DEST/debs"
"$JAVA_HOME21/bin/java" -version 2>&1 | grep -q 'version "21\.' || die "the unpacked Java 21 does not start"
echo "$JAVA_HOME21"
