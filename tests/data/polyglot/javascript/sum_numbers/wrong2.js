const data = require("fs").readFileSync(0, "utf8").split(/\s+/).filter(Boolean);
console.log("sum:", data.slice(1).map(Number).reduce((a, b) => a + b, 0));
