-- The warehouse next to the instance's database (docker-compose.yaml's postgres service).
CREATE DATABASE warehouse;
