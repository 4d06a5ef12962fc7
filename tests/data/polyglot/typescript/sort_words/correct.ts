import * as fs from "fs";
const lines: string[] = fs.readFileSync(0, "utf8").split("\n");
const n = Number(lines[0]);
const words = lines.slice(1, 1 + n).map((w) => w.trim());
words.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
console.log(words.join("\n"));
