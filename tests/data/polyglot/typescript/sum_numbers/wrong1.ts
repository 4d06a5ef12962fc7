import * as fs from "fs";
const data: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter(Boolean);
const n = Number(data[0]);
let total = 0;
for (let i = 1; i < n; i++) total += Number(data[i]);
console.log(String(total));
