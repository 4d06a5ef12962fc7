const lines = require("fs").readFileSync(0, "utf8").split("\n");
const n = Number(lines[0]);
const words = lines.slice(1, 1 + n).map((w) => w.trim());
words.sort((a, b) => a.localeCompare(b));
console.log(words.join("\n"));
