# glibc base (Debian slim), not Alpine: musl's allocator degrades badly under the API's and workers' load.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY requirements.txt .
RUN pip install -r requirements.txt
COPY . .
# /models is where the compose file mounts the shared bundle volume; a new named volume takes this ownership.
RUN useradd --create-home prefeed && mkdir -p /app/var /models && chown -R prefeed /app/var /models
USER prefeed
EXPOSE 8000
CMD ["python", "manage.py", "serve", "--host", "0.0.0.0", "--port", "8000"]
