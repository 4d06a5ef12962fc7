"""Hostile programs in every language the sandbox runs, for test_languages_adversarial.

Each entry is source text with ``@TOKENS@`` the test fills in (host paths, a port, a pid).
They attack what tests/sandbox/test_adversarial.py attacks with Python: processes (fork bombs,
killing outside), memory, the host's files (writing, reading), the network, the verdict (a
solution forging its own results), and, for the compiled languages, the compiler itself.
"""

from __future__ import annotations

FORK_BOMB = {
    "python": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "c": "#include <unistd.h>\nint main(void) { for (;;) fork(); }\n",
    "cpp": "#include <unistd.h>\nint main() { for (;;) fork(); }\n",
    "javascript": ('const cp = require("child_process");\nfor (;;) {\n  try { cp.spawn(process.execPath,'
                   ' [__filename], { detached: true, stdio: "ignore" }); } catch (e) {}\n}\n'),
    "typescript": ('import * as cp from "child_process";\nfor (;;) {\n  try { cp.spawn(process.execPath,'
                   ' [__filename], { detached: true, stdio: "ignore" }); } catch (e) {}\n}\n'),
    "java": ("public class Main {\n  public static void main(String[] a) {\n    while (true) {\n"
             "      try { new ProcessBuilder(\"/bin/sh\", \"-c\", \"sleep 100 & sleep 100\").start(); }"
             " catch (Exception e) { }\n    }\n  }\n}\n"),
    "go": ('package main\n\nimport "os/exec"\n\nfunc main() {\n\tfor {\n'
           '\t\t_ = exec.Command("/proc/self/exe").Start()\n\t}\n}\n'),
    "rust": ('fn main() {\n    loop {\n        let _ = std::process::Command::new("/proc/self/exe")'
             '.spawn();\n    }\n}\n'),
}

# Allocates and touches 16 MiB at a time, for ever.
MEMORY_BOMB = {
    "python": "keep = []\nwhile True:\n    keep.append(b'x' * (16 << 20))\n",
    "c": ("#include <stdlib.h>\n#include <string.h>\nint main(void) {\n  for (;;) {\n"
          "    char *p = malloc(16 << 20);\n    if (!p) return 3;\n    memset(p, 1, 16 << 20);\n"
          "  }\n}\n"),
    "cpp": ("#include <vector>\nint main() {\n  std::vector<std::vector<char>> keep;\n"
            "  for (;;) keep.emplace_back(16 << 20, 1);\n}\n"),
    "javascript": "const keep = [];\nfor (;;) keep.push(Buffer.alloc(16 << 20, 1));\n",
    "typescript": "const keep: Buffer[] = [];\nfor (;;) keep.push(Buffer.alloc(16 << 20, 1));\n",
    "java": ("import java.util.*;\npublic class Main {\n  public static void main(String[] a) {\n"
             "    List<long[]> keep = new ArrayList<>();\n    while (true) keep.add(new long[2 << 20]);"
             "\n  }\n}\n"),
    "go": ("package main\n\nvar keep [][]byte\n\nfunc main() {\n\tfor {\n"
           "\t\tb := make([]byte, 16<<20)\n\t\tfor i := range b {\n\t\t\tb[i] = 1\n\t\t}\n"
           "\t\tkeep = append(keep, b)\n\t}\n}\n"),
    "rust": ("fn main() {\n    let mut keep = Vec::new();\n    loop {\n"
             "        keep.push(vec![1u8; 16 << 20]);\n    }\n}\n"),
}

# Tries to write @VICTIM@ (a host file), to plant files in /usr, /etc, /root, the project and
# the harness; prints "planted <path>" for each write that worked.
_TARGETS = ["@VICTIM@", "@PLANT@", "/usr/planted", "/etc/planted", "/root/planted",
            "@PROJECT@/planted", "/opt/arenaforge/server.py"]
WRITE_OUTSIDE = {
    "python": ("import os\nfor p in " + repr(_TARGETS) + ":\n    try:\n"
               "        os.makedirs(os.path.dirname(p), exist_ok=True)\n"
               "        open(p, 'w').write('pwned')\n        print('planted', p)\n"
               "    except OSError:\n        pass\n"),
    "c": ("#include <stdio.h>\nint main(void) {\n  const char *t[] = {"
          + ", ".join(f'"{p}"' for p in _TARGETS) + "};\n"
          "  for (int i = 0; i < 7; i++) { FILE *f = fopen(t[i], \"w\");"
          " if (f) { fputs(\"pwned\", f); fclose(f); printf(\"planted %s\\n\", t[i]); } }\n"
          "  return 0;\n}\n"),
    "cpp": ("#include <fstream>\n#include <iostream>\nint main() {\n  const char *t[] = {"
            + ", ".join(f'"{p}"' for p in _TARGETS) + "};\n"
            "  for (auto p : t) { std::ofstream f(p); if (f && (f << \"pwned\")) "
            "std::cout << \"planted \" << p << \"\\n\"; }\n}\n"),
    "javascript": ("const fs = require(\"fs\");\nfor (const p of " + repr(_TARGETS).replace("'", '"')
                   + ") {\n  try { fs.writeFileSync(p, \"pwned\"); console.log(\"planted\", p); }"
                   " catch (e) {}\n}\n"),
    "typescript": ("import * as fs from \"fs\";\nfor (const p of " + repr(_TARGETS).replace("'", '"')
                   + ") {\n  try { fs.writeFileSync(p, \"pwned\"); console.log(\"planted\", p); }"
                   " catch (e) {}\n}\n"),
    "java": ("import java.io.*;\npublic class Main {\n  public static void main(String[] a) {\n"
             "    String[] t = {" + ", ".join(f'"{p}"' for p in _TARGETS) + "};\n"
             "    for (String p : t) {\n      try (FileWriter w = new FileWriter(p)) { w.write(\"pwned\");"
             " System.out.println(\"planted \" + p); } catch (IOException e) { }\n    }\n  }\n}\n"),
    "go": ("package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n"
           "\tfor _, p := range []string{" + ", ".join(f'"{p}"' for p in _TARGETS) + "} {\n"
           "\t\tif os.WriteFile(p, []byte(\"pwned\"), 0o644) == nil {\n"
           "\t\t\tfmt.Println(\"planted\", p)\n\t\t}\n\t}\n}\n"),
    "rust": ("fn main() {\n    for p in [" + ", ".join(f'"{p}"' for p in _TARGETS) + "] {\n"
             "        if std::fs::write(p, \"pwned\").is_ok() {\n"
             "            println!(\"planted {}\", p);\n        }\n    }\n}\n"),
}

# Prints whatever it can read of the host: /etc/shadow, /etc/passwd, a secret file of the test,
# the project's README, /root.
_SOURCES = ["/etc/shadow", "/etc/passwd", "@SECRET@", "@PROJECT@/README.md", "/root/.bashrc",
            "/proc/1/environ"]
READ_HOST = {
    "python": ("for p in " + repr(_SOURCES) + ":\n    try:\n        print(open(p).read()[:200])\n"
               "    except OSError as e:\n        print('denied', p)\n"),
    "c": ("#include <stdio.h>\nint main(void) {\n  const char *t[] = {"
          + ", ".join(f'"{p}"' for p in _SOURCES) + "};\n  char buf[201];\n"
          "  for (int i = 0; i < 6; i++) { FILE *f = fopen(t[i], \"r\"); if (!f) { printf(\"denied %s\\n\","
          " t[i]); continue; } size_t n = fread(buf, 1, 200, f); buf[n] = 0; puts(buf); fclose(f); }\n"
          "  return 0;\n}\n"),
    "cpp": ("#include <fstream>\n#include <iostream>\n#include <sstream>\nint main() {\n  const char *t[] = {"
            + ", ".join(f'"{p}"' for p in _SOURCES) + "};\n"
            "  for (auto p : t) { std::ifstream f(p); if (!f) { std::cout << \"denied \" << p << \"\\n\";"
            " continue; } std::stringstream s; s << f.rdbuf(); std::cout << s.str().substr(0, 200) << \"\\n\"; }\n}\n"),
    "javascript": ("const fs = require(\"fs\");\nfor (const p of " + repr(_SOURCES).replace("'", '"')
                   + ") {\n  try { console.log(fs.readFileSync(p, \"utf8\").slice(0, 200)); }"
                   " catch (e) { console.log(\"denied\", p); }\n}\n"),
    "typescript": ("import * as fs from \"fs\";\nfor (const p of " + repr(_SOURCES).replace("'", '"')
                   + ") {\n  try { console.log(fs.readFileSync(p, \"utf8\").slice(0, 200)); }"
                   " catch (e) { console.log(\"denied\", p); }\n}\n"),
    "java": ("import java.nio.file.*;\npublic class Main {\n  public static void main(String[] a) {\n"
             "    String[] t = {" + ", ".join(f'"{p}"' for p in _SOURCES) + "};\n"
             "    for (String p : t) {\n      try { System.out.println(new String(Files.readAllBytes("
             "Paths.get(p)))); } catch (Exception e) { System.out.println(\"denied \" + p); }\n    }\n  }\n}\n"),
    "go": ("package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n"
           "\tfor _, p := range []string{" + ", ".join(f'"{p}"' for p in _SOURCES) + "} {\n"
           "\t\tb, err := os.ReadFile(p)\n\t\tif err != nil {\n\t\t\tfmt.Println(\"denied\", p)\n"
           "\t\t\tcontinue\n\t\t}\n\t\tfmt.Println(string(b))\n\t}\n}\n"),
    "rust": ("fn main() {\n    for p in [" + ", ".join(f'"{p}"' for p in _SOURCES) + "] {\n"
             "        match std::fs::read_to_string(p) {\n            Ok(s) => println!(\"{}\", s),\n"
             "            Err(_) => println!(\"denied {}\", p),\n        }\n    }\n}\n"),
}

# Connects to a host port on loopback (@PORT@) and to the internet; prints "connected ..."
NETWORK = {
    "c": ("#include <arpa/inet.h>\n#include <stdio.h>\n#include <sys/socket.h>\n#include <unistd.h>\n"
          "int main(void) {\n  const char *hosts[] = {\"127.0.0.1\", \"1.1.1.1\"};\n"
          "  int ports[] = {@PORT@, 53};\n  for (int i = 0; i < 2; i++) {\n"
          "    int s = socket(AF_INET, SOCK_STREAM, 0);\n    if (s < 0) { perror(\"socket\"); continue; }\n"
          "    struct sockaddr_in a = {0}; a.sin_family = AF_INET; a.sin_port = htons(ports[i]);\n"
          "    inet_pton(AF_INET, hosts[i], &a.sin_addr);\n"
          "    if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) printf(\"connected %s\\n\", hosts[i]);\n"
          "    close(s);\n  }\n  return 0;\n}\n"),
    "javascript": ("const net = require(\"net\");\nfor (const [h, p] of [[\"127.0.0.1\", @PORT@],"
                   " [\"1.1.1.1\", 53]]) {\n  const s = net.connect(p, h, () => { console.log(\"connected\", h);"
                   " s.destroy(); });\n  s.on(\"error\", (e) => console.log(\"blocked\", h, e.code));\n}\n"
                   "setTimeout(() => {}, 1500);\n"),
    "java": ("import java.net.*;\npublic class Main {\n  public static void main(String[] a) {\n"
             "    String[] h = {\"127.0.0.1\", \"1.1.1.1\"};\n    int[] p = {@PORT@, 53};\n"
             "    for (int i = 0; i < 2; i++) {\n      try (Socket s = new Socket()) { s.connect(new"
             " InetSocketAddress(h[i], p[i]), 1000); System.out.println(\"connected \" + h[i]); }\n"
             "      catch (Exception e) { System.out.println(\"blocked \" + h[i] + \" \" + e); }\n    }\n  }\n}\n"),
    "go": ("package main\n\nimport (\n\t\"fmt\"\n\t\"net\"\n\t\"time\"\n)\n\nfunc main() {\n"
           "\tfor _, addr := range []string{\"127.0.0.1:@PORT@\", \"1.1.1.1:53\"} {\n"
           "\t\tc, err := net.DialTimeout(\"tcp\", addr, time.Second)\n\t\tif err != nil {\n"
           "\t\t\tfmt.Println(\"blocked\", addr, err)\n\t\t\tcontinue\n\t\t}\n"
           "\t\tfmt.Println(\"connected\", addr)\n\t\tc.Close()\n\t}\n}\n"),
    "rust": ("use std::net::TcpStream;\nuse std::time::Duration;\nfn main() {\n"
             "    for addr in [\"127.0.0.1:@PORT@\", \"1.1.1.1:53\"] {\n"
             "        match TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(1)) {\n"
             "            Ok(_) => println!(\"connected {}\", addr),\n"
             "            Err(e) => println!(\"blocked {} {}\", addr, e),\n        }\n    }\n}\n"),
}
NETWORK["python"] = ("import socket\nfor host, port in (('127.0.0.1', @PORT@), ('1.1.1.1', 53)):\n"
                     "    try:\n        socket.create_connection((host, port), timeout=1)\n"
                     "        print('connected', host)\n    except OSError as e:\n"
                     "        print('blocked', host, e)\n")
NETWORK["cpp"] = NETWORK["c"]
NETWORK["typescript"] = ("import * as net from \"net\";\n"
                         "const targets: [string, number][] = [[\"127.0.0.1\", @PORT@], [\"1.1.1.1\", 53]];\n"
                         "for (const [h, p] of targets) {\n  const s = net.connect(p, h, () => {"
                         " console.log(\"connected\", h); s.destroy(); });\n"
                         "  s.on(\"error\", (e: any) => console.log(\"blocked\", h, e.code));\n}\n"
                         "setTimeout(() => {}, 1500);\n")

# Kills a host process (@VICTIM_PID@) and everything it may signal (kill -1).
KILL_OUTSIDE = {
    "python": ("import os, signal\nfor pid in (@VICTIM_PID@, 1, -1):\n    try:\n"
               "        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"),
    "c": ("#include <signal.h>\n#include <sys/types.h>\nint main(void) {\n"
          "  kill(@VICTIM_PID@, SIGKILL); kill(1, SIGKILL); kill(-1, SIGKILL); return 0;\n}\n"),
    "cpp": ("#include <csignal>\n#include <sys/types.h>\nint main() {\n"
            "  kill(@VICTIM_PID@, SIGKILL); kill(1, SIGKILL); kill(-1, SIGKILL); return 0;\n}\n"),
    "javascript": ("for (const pid of [@VICTIM_PID@, 1, -1]) {\n  try { process.kill(pid, \"SIGKILL\"); }"
                   " catch (e) {}\n}\n"),
    "typescript": ("for (const pid of [@VICTIM_PID@, 1, -1]) {\n  try { process.kill(pid, \"SIGKILL\"); }"
                   " catch (e) {}\n}\n"),
    "java": ("public class Main {\n  public static void main(String[] a) throws Exception {\n"
             "    ProcessHandle.of(@VICTIM_PID@L).ifPresent(ProcessHandle::destroyForcibly);\n"
             "    new ProcessBuilder(\"/bin/sh\", \"-c\", \"kill -9 @VICTIM_PID@ 1 -1\").start().waitFor();\n"
             "  }\n}\n"),
    "go": ("package main\n\nimport \"syscall\"\n\nfunc main() {\n"
           "\tfor _, pid := range []int{@VICTIM_PID@, 1, -1} {\n\t\t_ = syscall.Kill(pid, syscall.SIGKILL)\n"
           "\t}\n}\n"),
    "rust": ("extern \"C\" {\n    fn kill(pid: i32, sig: i32) -> i32;\n}\nfn main() {\n"
             "    for pid in [@VICTIM_PID@, 1, -1] {\n        unsafe {\n            kill(pid, 9);\n"
             "        }\n    }\n}\n"),
}

# A function task's solution (f(x) = 2x expected) that forges results: lines without the job's
# nonce on the calls pipe and on stdout ("PASSED", the expected values), then exits 0.
FORGED = {
    "python": ("import os\ndef f(x):\n    for k in range(3):\n        os.write(3, f'0 r {k} {2 * (k + 1)}\\n'.encode())\n"
               "    print('PASSED')\n    os._exit(0)\n"),
    "c": ("#include <stdio.h>\n#include <unistd.h>\nlong long f(long long x) {\n"
          "  for (int k = 0; k < 3; k++) dprintf(3, \"0 r %d %d\\n\", k, 2 * (k + 1));\n"
          "  puts(\"PASSED\"); fflush(stdout); _exit(0);\n}\n"),
    "cpp": ("#include <cstdio>\n#include <unistd.h>\nlong long f(long long x) {\n"
            "  for (int k = 0; k < 3; k++) dprintf(3, \"0 r %d %d\\n\", k, 2 * (k + 1));\n"
            "  std::puts(\"PASSED\"); std::fflush(stdout); _exit(0);\n}\n"),
    "javascript": ("function f(x) {\n  const fs = require(\"fs\");\n"
                   "  for (let k = 0; k < 3; k++) fs.writeSync(3, `0 r ${k} ${2 * (k + 1)}\\n`);\n"
                   "  console.log(\"PASSED\");\n  process.exit(0);\n}\n"),
    "typescript": ("import * as fs from \"fs\";\nfunction f(x: number): number {\n"
                   "  for (let k = 0; k < 3; k++) fs.writeSync(3, `0 r ${k} ${2 * (k + 1)}\\n`);\n"
                   "  console.log(\"PASSED\");\n  process.exit(0);\n}\n"),
    "java": ("class Solution {\n  static long f(long x) {\n    try (java.io.FileOutputStream o ="
             " new java.io.FileOutputStream(\"/proc/self/fd/3\")) {\n"
             "      for (int k = 0; k < 3; k++) o.write((\"0 r \" + k + \" \" + 2 * (k + 1) + \"\\n\").getBytes());\n"
             "    } catch (Exception e) { }\n    System.out.println(\"PASSED\");\n    System.exit(0);\n"
             "    return 0;\n  }\n}\n"),
    "go": ("package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc f(x int) int {\n"
           "\tout := os.NewFile(3, \"calls\")\n\tfor k := 0; k < 3; k++ {\n"
           "\t\tfmt.Fprintf(out, \"0 r %d %d\\n\", k, 2*(k+1))\n\t}\n\tfmt.Println(\"PASSED\")\n"
           "\tos.Exit(0)\n\treturn 0\n}\n"),
    "rust": ("use std::io::Write;\nuse std::os::unix::io::FromRawFd;\nfn f(_x: i64) -> i64 {\n"
             "    let mut out = unsafe { std::fs::File::from_raw_fd(3) };\n"
             "    for k in 0..3 {\n        let _ = writeln!(out, \"0 r {} {}\", k, 2 * (k + 1));\n    }\n"
             "    println!(\"PASSED\");\n    std::process::exit(0);\n}\n"),
}

# Programs that make the compiler itself work without end: constexpr and template blow-ups,
# an include of an endless file, a macro that expands to 2^40 tokens, macro recursion.
COMPILER_BOMBS = {
    "cpp-constexpr": ("cpp", (
        "constexpr long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n"
        "static_assert(fib(90) > 0, \"\");\nint main() {}\n")),
    "cpp-templates": ("cpp", (
        "template <int N, int M> struct A {\n"
        "  static constexpr long v = (A<N - 1, M>::v + A<N, M - 1>::v) % 1000003;\n};\n"
        "template <int M> struct A<0, M> { static constexpr long v = 1; };\n"
        "template <int N> struct A<N, 0> { static constexpr long v = 1; };\n"
        "long x = A<440, 440>::v;\nint main() {}\n")),
    "cpp-include-zero": ("cpp", "#include \"/dev/zero\"\nint main() {}\n"),
    "c-macros": ("c", "#define A0 x\n"
                 + "".join(f"#define A{i} A{i - 1} A{i - 1}\n" for i in range(1, 41))
                 + "int main(void) { A40; return 0; }\n"),
    "rust-macro": ("rust", (
        "#![recursion_limit = \"100000\"]\n"
        "macro_rules! bomb {\n    () => { bomb!(); bomb!(); };\n}\n"
        "fn main() {\n    bomb!();\n}\n")),
}
