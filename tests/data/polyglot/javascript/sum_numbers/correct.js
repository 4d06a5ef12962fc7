const data = require("fs").readFileSync(0, "utf8").split(/\s+/).filter(Boolean);
const n = Number(data[0]);
let total = 0n;
for (let i = 1; i <= n; i++) total += BigInt(data[i]);
console.log(total.toString());
