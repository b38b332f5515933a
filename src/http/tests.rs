// TEMP
